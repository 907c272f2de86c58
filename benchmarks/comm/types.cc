// Names, parsing and the nccl-tests size → count rules for each collective.
#include "benchmarks/comm/types.h"

#include <algorithm>

#include "core/error.h"

namespace dtune::comm {

const std::vector<Collective>& all_collectives() {
  static const std::vector<Collective> k = {
      Collective::kAllreduce, Collective::kAllgather, Collective::kReduceScatter,
      Collective::kBroadcast, Collective::kReduce,    Collective::kAlltoall,
      Collective::kSendrecv};
  return k;
}
const std::vector<Dtype>& all_dtypes() {
  static const std::vector<Dtype> k = {Dtype::kFloat32, Dtype::kFloat64, Dtype::kInt32,
                                       Dtype::kBfloat16, Dtype::kFloat16};
  return k;
}
const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> k = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                          ReduceOp::kMax, ReduceOp::kAvg};
  return k;
}

std::string to_string(Collective c) {
  switch (c) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kAllgather: return "allgather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAlltoall: return "alltoall";
    case Collective::kSendrecv: return "sendrecv";
  }
  return "?";
}
std::string to_string(Dtype d) {
  switch (d) {
    case Dtype::kFloat32: return "float32";
    case Dtype::kFloat64: return "float64";
    case Dtype::kInt32: return "int32";
    case Dtype::kBfloat16: return "bfloat16";
    case Dtype::kFloat16: return "float16";
  }
  return "?";
}
std::string nccl_tests_name(Dtype d) {
  switch (d) {
    case Dtype::kFloat32: return "float";
    case Dtype::kFloat64: return "double";
    case Dtype::kInt32: return "int32";
    case Dtype::kBfloat16: return "bfloat16";
    case Dtype::kFloat16: return "half";
  }
  return "?";
}
std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "?";
}
std::string to_string(Placement p) {
  return p == Placement::kOutOfPlace ? "out-of-place" : "in-place";
}

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
template <typename T>
std::string choices(const std::vector<T>& all) {
  std::string out;
  for (const auto& v : all) out += (out.empty() ? "" : ", ") + to_string(v);
  return out;
}
}  // namespace

Collective parse_collective(const std::string& s, const std::string& flag) {
  const std::string l = lower(s);
  for (Collective c : all_collectives())
    if (l == to_string(c)) return c;
  if (l == "reducescatter" || l == "reduce-scatter") return Collective::kReduceScatter;
  if (l == "bcast") return Collective::kBroadcast;
  if (l == "all_reduce") return Collective::kAllreduce;
  if (l == "all_gather") return Collective::kAllgather;
  if (l == "all_to_all" || l == "alltoallv") return Collective::kAlltoall;
  throw UsageError(flag + ": unknown collective '" + s + "' (choose from " +
                   choices(all_collectives()) + ", or all)");
}

Dtype parse_dtype(const std::string& s, const std::string& flag) {
  const std::string l = lower(s);
  for (Dtype d : all_dtypes())
    if (l == to_string(d) || l == nccl_tests_name(d)) return d;
  if (l == "fp32") return Dtype::kFloat32;
  if (l == "fp64") return Dtype::kFloat64;
  if (l == "int") return Dtype::kInt32;
  if (l == "bf16") return Dtype::kBfloat16;
  if (l == "fp16") return Dtype::kFloat16;
  throw UsageError(flag + ": unknown datatype '" + s + "' (choose from " + choices(all_dtypes()) +
                   ", or all)");
}

ReduceOp parse_op(const std::string& s, const std::string& flag) {
  const std::string l = lower(s);
  for (ReduceOp op : all_ops())
    if (l == to_string(op)) return op;
  throw UsageError(flag + ": unknown reduction op '" + s + "' (choose from " + choices(all_ops()) +
                   ", or all)");
}

size_t dtype_size(Dtype d) {
  switch (d) {
    case Dtype::kFloat64: return 8;
    case Dtype::kFloat32:
    case Dtype::kInt32: return 4;
    case Dtype::kBfloat16:
    case Dtype::kFloat16: return 2;
  }
  return 1;
}

bool is_reduction(Collective c) {
  return c == Collective::kAllreduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}
bool is_rooted(Collective c) { return c == Collective::kBroadcast || c == Collective::kReduce; }

OpShape make_shape(Collective c, Dtype d, ReduceOp op, int root, int nranks, size_t requested_bytes) {
  OpShape s{c, d, op, is_rooted(c) ? root : -1, nranks, requested_bytes};
  const size_t n = static_cast<size_t>(nranks);
  const size_t elems = requested_bytes / dtype_size(d);
  // As nccl-tests' *GetCollByteCount: collectives whose size is the total over ranks split it in
  // n equal parts, rounding down.
  switch (c) {
    case Collective::kAllreduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendrecv:
      s.count = elems;
      s.send_count = s.recv_count = elems;
      break;
    case Collective::kAllgather:  // size = total output; each rank sends count
      s.count = elems / n;
      s.send_count = s.count;
      s.recv_count = s.count * n;
      break;
    case Collective::kReduceScatter:  // size = total input; each rank receives count
      s.count = elems / n;
      s.send_count = s.count * n;
      s.recv_count = s.count;
      break;
    case Collective::kAlltoall:  // size = total per rank; count to each peer
      s.count = elems / n;
      s.send_count = s.recv_count = s.count * n;
      break;
  }
  s.bytes = std::max(s.send_count, s.recv_count) * dtype_size(d);
  return s;
}

}  // namespace dtune::comm
