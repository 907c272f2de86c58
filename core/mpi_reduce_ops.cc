// fp16 / bf16 user-defined MPI reductions.
#include "core/mpi_reduce_ops.h"

#include <cstdint>

#include "core/error.h"
#include "core/float16.h"

namespace dtune {
namespace {

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), typename F>
void reduce16(void* in, void* inout, int* len, F f) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = FromFloat(f(ToFloat(a[i]), ToFloat(b[i])));
}

#define DTUNE_DEFINE_OP16(NAME, EXPR)                                                              \
  void half_##NAME(void* in, void* inout, int* len, MPI_Datatype*) {                               \
    reduce16<half_to_float, float_to_half>(in, inout, len, [](float x, float y) { return EXPR; }); \
  }                                                                                                \
  void bf16_##NAME(void* in, void* inout, int* len, MPI_Datatype*) {                               \
    reduce16<bfloat16_to_float, float_to_bfloat16>(in, inout, len,                                 \
                                                   [](float x, float y) { return EXPR; });         \
  }
DTUNE_DEFINE_OP16(sum, x + y)
DTUNE_DEFINE_OP16(prod, x* y)
DTUNE_DEFINE_OP16(min, x < y ? x : y)
DTUNE_DEFINE_OP16(max, x > y ? x : y)
#undef DTUNE_DEFINE_OP16

int index_of(ReduceKind op) {
  switch (op) {
    case ReduceKind::kSum:
      return 0;
    case ReduceKind::kProd:
      return 1;
    case ReduceKind::kMin:
      return 2;
    case ReduceKind::kMax:
      return 3;
  }
  return 0;
}

}  // namespace

Mpi16BitOps::Mpi16BitOps() {
  MPI_User_function* half_fns[] = {half_sum, half_prod, half_min, half_max};
  MPI_User_function* bf16_fns[] = {bf16_sum, bf16_prod, bf16_min, bf16_max};
  for (int i = 0; i < 4; ++i) {
    DTUNE_MPI_CHECK(MPI_Op_create(half_fns[i], 1, &half_[i]));
    DTUNE_MPI_CHECK(MPI_Op_create(bf16_fns[i], 1, &bf16_[i]));
  }
}

Mpi16BitOps::~Mpi16BitOps() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (int i = 0; i < 4; ++i) {
    MPI_Op_free(&half_[i]);
    MPI_Op_free(&bf16_[i]);
  }
}

MPI_Op Mpi16BitOps::get(Fp16Kind kind, ReduceKind op) const {
  return kind == Fp16Kind::kHalf ? half_[index_of(op)] : bf16_[index_of(op)];
}

MPI_Op builtin_op(ReduceKind op) {
  static const MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
  return ops[index_of(op)];
}

}  // namespace dtune
