// Input patterns, the reduction reference and the comparison of the correctness check; each
// collective's expected result is its row's `expected` (collectives.cc).
#include "benchmarks/comm/check.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "benchmarks/comm/collectives.h"
#include "core/float16.h"

namespace dtune::comm {
namespace {

// Never a valid result: exact in every dtype (bf16 included), not a power of two (prod results
// are), and beyond any sum of inputs in [-5, 5] for fewer than 1996 ranks.
constexpr double kSentinel = 9984.0;

double reduce_pair(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return a;
}

// Relative tolerance: zero except for avg of floating types (one rounding of the division).
double tolerance(const OpShape& s) {
  if (s.op != ReduceOp::kAvg || !is_reduction(s.collective)) return 0;
  switch (s.dtype) {
    case Dtype::kFloat64:
      return 1e-15;
    case Dtype::kFloat32:
      return 1e-6;
    case Dtype::kFloat16:
      return 1e-3;
    case Dtype::kBfloat16:
      return 8e-3;
    case Dtype::kInt32:
      return 0;  // handled in count_wrong: integer division may round either way
  }
  return 0;
}

}  // namespace

double reduced_value(const OpShape& s, size_t index) {
  double acc = input_value(s, 0, index);
  for (int r = 1; r < s.nranks; ++r) acc = reduce_pair(s.op, acc, input_value(s, r, index));
  if (s.op == ReduceOp::kAvg) {
    if (s.dtype == Dtype::kInt32) return std::trunc(acc / s.nranks);
    return acc / s.nranks;
  }
  return acc;
}

double input_value(const OpShape& s, int rank, size_t index) {
  const size_t r = static_cast<size_t>(rank);
  if (is_reduction(s.collective)) {
    if (s.op == ReduceOp::kProd) return ((index + r) % 4 == 0) ? 2.0 : 1.0;
    return static_cast<double>(static_cast<int>((index * 7 + r * 13) % 11) - 5);
  }
  return static_cast<double>((r * 31 + index) % 97);
}

double load_element(Dtype d, const uint8_t* base, size_t i) {
  switch (d) {
    case Dtype::kFloat32: {
      float v;
      std::memcpy(&v, base + 4 * i, 4);
      return v;
    }
    case Dtype::kFloat64: {
      double v;
      std::memcpy(&v, base + 8 * i, 8);
      return v;
    }
    case Dtype::kInt32: {
      int32_t v;
      std::memcpy(&v, base + 4 * i, 4);
      return v;
    }
    case Dtype::kBfloat16: {
      uint16_t v;
      std::memcpy(&v, base + 2 * i, 2);
      return bfloat16_to_float(v);
    }
    case Dtype::kFloat16: {
      uint16_t v;
      std::memcpy(&v, base + 2 * i, 2);
      return half_to_float(v);
    }
  }
  return 0;
}

void store_element(Dtype d, uint8_t* base, size_t i, double value) {
  switch (d) {
    case Dtype::kFloat32: {
      float v = static_cast<float>(value);
      std::memcpy(base + 4 * i, &v, 4);
      break;
    }
    case Dtype::kFloat64: {
      std::memcpy(base + 8 * i, &value, 8);
      break;
    }
    case Dtype::kInt32: {
      int32_t v = static_cast<int32_t>(value);
      std::memcpy(base + 4 * i, &v, 4);
      break;
    }
    case Dtype::kBfloat16: {
      uint16_t v = float_to_bfloat16(static_cast<float>(value));
      std::memcpy(base + 2 * i, &v, 2);
      break;
    }
    case Dtype::kFloat16: {
      uint16_t v = float_to_half(static_cast<float>(value));
      std::memcpy(base + 2 * i, &v, 2);
      break;
    }
  }
}

CheckImages make_check_images(const OpShape& s, Placement p, int rank, bool plant_wrong) {
  const size_t es = dtype_size(s.dtype);
  std::vector<uint8_t> input(s.send_count * es);
  for (size_t i = 0; i < s.send_count; ++i)
    store_element(s.dtype, input.data(), i, input_value(s, rank, i));
  if (plant_wrong && s.send_count > 0)
    store_element(s.dtype, input.data(), 0, input_value(s, rank, 0) + 1.0);
  CheckImages img;
  // The receive buffer holds max(send, recv) elements: in-place reduce_scatter keeps its whole
  // input there.
  const size_t recv_elems = std::max(s.send_count, s.recv_count);
  img.recv.resize(recv_elems * es);
  for (size_t i = 0; i < recv_elems; ++i) store_element(s.dtype, img.recv.data(), i, kSentinel);
  if (p == Placement::kOutOfPlace) {
    img.send = std::move(input);
  } else {
    const size_t at = static_cast<size_t>(rank) * s.send_in_place_offset * es;
    std::memcpy(img.recv.data() + at, input.data(), input.size());
  }
  return img;
}

int64_t count_wrong(const OpShape& s, Placement p, int rank, const std::vector<uint8_t>& recv,
                    size_t result_offset) {
  const CollectiveSpec& spec = collective_spec(s.collective);
  if (spec.result_ranks == ResultRanks::kRootOnly && rank != s.root) return 0;
  if (spec.result_ranks == ResultRanks::kAllButRoot && rank == s.root) return 0;
  const double tol = tolerance(s);
  const bool int_avg = s.op == ReduceOp::kAvg && s.dtype == Dtype::kInt32 && spec.reduction;
  int64_t wrong = 0;
  const uint8_t* base = recv.data() + result_offset * dtype_size(s.dtype);
  for (size_t i = 0; i < s.recv_count; ++i) {
    const double got = load_element(s.dtype, base, i);
    // Round the exact value to the dtype first: that is the best any library can return.
    uint8_t tmp[8];
    store_element(s.dtype, tmp, 0, spec.expected(s, rank, i));
    const double want = load_element(s.dtype, tmp, 0);
    bool ok = got == want;
    if (!ok && tol > 0) ok = std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
    if (!ok && int_avg) ok = std::fabs(got - want) <= 1.0;
    wrong += ok ? 0 : 1;
  }
  return wrong;
}

}  // namespace dtune::comm
