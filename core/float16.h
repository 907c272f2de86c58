// IEEE binary16 (fp16) and bfloat16 stored as uint16_t, with conversions to and from float that
// round to nearest even (what CUDA's __float2half_rn and __float2bfloat16_rn do). Used by the CPU
// reference of checks and by MPI's user-defined 16-bit reductions (MPI has no 16-bit floats).
#pragma once

#include <cstdint>

namespace dtune {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

}  // namespace dtune
