// MPI reductions for the 16-bit floating types MPI lacks (IEEE fp16 and bfloat16): user-defined
// ops that reduce in fp32 and round to nearest even, as NCCL does per step. Shared by dtune-comm's
// MPI backend and dtune-train's MPI gradient reducer. Created after MPI_Init, freed before
// MPI_Finalize (own it in an object that dies first).
#pragma once

#include <mpi.h>

namespace dtune {

enum class Fp16Kind { kHalf, kBfloat16 };
enum class ReduceKind { kSum, kProd, kMin, kMax };

class Mpi16BitOps {
 public:
  Mpi16BitOps();
  Mpi16BitOps(const Mpi16BitOps&) = delete;
  Mpi16BitOps& operator=(const Mpi16BitOps&) = delete;
  ~Mpi16BitOps();
  MPI_Op get(Fp16Kind kind, ReduceKind op) const;
  // The datatype to pair with these ops (16-bit elements, reduced by the user functions).
  static MPI_Datatype datatype() { return MPI_UINT16_T; }

 private:
  MPI_Op half_[4] = {};
  MPI_Op bf16_[4] = {};
};

MPI_Op builtin_op(ReduceKind op);

}  // namespace dtune
