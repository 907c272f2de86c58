// The name tables of dtune-comm's enums (the collectives' are their rows in collectives.cc), and
// the functions that read them.
#include "benchmarks/comm/types.h"

#include <cctype>

namespace dtune::comm {

bool same_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

const std::vector<DtypeSpec>& dtype_table() {
  using D = Dtype;
  static const std::vector<DtypeSpec> k = {
      {D::kFloat32, "float32", "float", 4, {"float", "fp32"}},
      {D::kFloat64, "float64", "double", 8, {"double", "fp64"}},
      {D::kInt32, "int32", "int32", 4, {"int"}},
      {D::kBfloat16, "bfloat16", "bfloat16", 2, {"bf16"}},
      {D::kFloat16, "float16", "half", 2, {"half", "fp16"}},
  };
  return k;
}
const std::vector<EnumName<ReduceOp>>& reduce_op_names() {
  static const std::vector<EnumName<ReduceOp>> k = {{ReduceOp::kSum, "sum"},
                                                    {ReduceOp::kProd, "prod"},
                                                    {ReduceOp::kMin, "min"},
                                                    {ReduceOp::kMax, "max"},
                                                    {ReduceOp::kAvg, "avg"}};
  return k;
}
const std::vector<EnumName<Placement>>& placement_names() {
  static const std::vector<EnumName<Placement>> k = {{Placement::kOutOfPlace, "out-of-place"},
                                                     {Placement::kInPlace, "in-place"}};
  return k;
}
const std::vector<EnumName<TimeMode>>& time_mode_names() {
  static const std::vector<EnumName<TimeMode>> k = {{TimeMode::kRank0, "rank0"},
                                                    {TimeMode::kAvg, "avg"},
                                                    {TimeMode::kMin, "min"},
                                                    {TimeMode::kMax, "max"}};
  return k;
}
const std::vector<EnumName<Format>>& format_names() {
  static const std::vector<EnumName<Format>> k = {
      {Format::kTable, "table"}, {Format::kJson, "json"}, {Format::kCsv, "csv"}};
  return k;
}
const std::vector<EnumName<BackendKind>>& backend_names() {
  static const std::vector<EnumName<BackendKind>> k = {{BackendKind::kMpi, "mpi"},
                                                       {BackendKind::kNccl, "nccl"}};
  return k;
}
const std::vector<EnumName<MpiBuffers>>& mpi_buffers_names() {
  static const std::vector<EnumName<MpiBuffers>> k = {{MpiBuffers::kHost, "host"},
                                                      {MpiBuffers::kDevice, "device"}};
  return k;
}

const std::vector<EnumName<Algorithm>>& algorithm_names() {
  static const std::vector<EnumName<Algorithm>> k = {{Algorithm::kFlat, "flat"},
                                                     {Algorithm::kHierarchical, "hierarchical"}};
  return k;
}

const std::vector<EnumName<MpiProgress>>& mpi_progress_names() {
  static const std::vector<EnumName<MpiProgress>> k = {{MpiProgress::kCall, "call"},
                                                       {MpiProgress::kThread, "thread"}};
  return k;
}

const std::vector<EnumName<Pattern>>& pattern_names() {
  static const std::vector<EnumName<Pattern>> k = {{Pattern::kSizes, "sizes"},
                                                   {Pattern::kFsdp, "fsdp"}};
  return k;
}

std::vector<Dtype> all_dtypes() { return values_of(dtype_table()); }
std::vector<ReduceOp> all_ops() { return values_of(reduce_op_names()); }

std::string to_string(Dtype d) { return name_of(dtype_table(), d); }
std::string to_string(ReduceOp op) { return name_of(reduce_op_names(), op); }
std::string to_string(Placement p) { return name_of(placement_names(), p); }
std::string to_string(TimeMode m) { return name_of(time_mode_names(), m); }
std::string to_string(Format f) { return name_of(format_names(), f); }
std::string to_string(BackendKind b) { return name_of(backend_names(), b); }
std::string to_string(Algorithm a) { return name_of(algorithm_names(), a); }
std::string to_string(MpiBuffers b) { return name_of(mpi_buffers_names(), b); }
std::string to_string(MpiProgress m) { return name_of(mpi_progress_names(), m); }
std::string to_string(Pattern p) { return name_of(pattern_names(), p); }

std::string nccl_tests_name(Dtype d) {
  for (const auto& r : dtype_table())
    if (r.value == d) return std::string(r.nccl_tests_name);
  return "?";
}
size_t dtype_size(Dtype d) {
  for (const auto& r : dtype_table())
    if (r.value == d) return r.size_bytes;
  return 1;
}

Dtype parse_dtype(const std::string& s, const std::string& flag) {
  return parse_list_item(dtype_table(), s, flag, "datatype");
}
ReduceOp parse_op(const std::string& s, const std::string& flag) {
  return parse_list_item(reduce_op_names(), s, flag, "reduction op");
}

}  // namespace dtune::comm
