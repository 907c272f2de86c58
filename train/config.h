// What a training run is asked to do (dtune-train's options, parsed in
// benchmarks/train/options.cc), and each option enum's names: the one table per enum that
// command-line parsing, to_string and the results writers all read.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/model.h"

namespace dtune::train {

enum class Precision { kFp32, kTf32, kFp16, kBf16 };
enum class WeightsDtype { kFp32, kBf16 };
enum class OptimizerKind { kSgd, kAdamw };
enum class SyncBackend { kMpi, kNccl };
// --reduce-algo: how the MPI reducer sums a bucket (core/hierarchical_allreduce.h).
enum class ReduceAlgo { kFlat, kHierarchical };
enum class Overlap { kOn, kOff };
enum class Compression { kNone, kFp16, kBf16 };
enum class DeviceKind { kCpu, kCuda };
// Pipeline parallelism (train/pipeline/): the schedule, where a pipeline's stages sit, and how the
// model is cut.
enum class Schedule { kGpipe, k1f1b, kInterleaved, kZbH1, kZbV };
enum class PipelineLayout { kWithinNode, kAcrossNodes };
enum class PartitionBy { kFlops, kMeasured };
// --stage-pieces: what the partition may cut between (partition.h).
enum class StagePieces { kBlocks, kEnds };
// --shard: ZeRO's stages of sharded data parallelism (train/zero.h); none is DDP.
enum class ShardMode { kNone, kZero1, kZero2, kZero3 };
// The axes of the device mesh (train/mesh.h): tensor, pipeline and data parallelism.
enum class MeshAxis { kTp = 0, kPp = 1, kDp = 2 };
inline constexpr int kMeshAxes = 3;
// --mesh-order: the axes innermost first (the one whose coordinate changes between consecutive
// ranks first).
using MeshOrder = std::array<MeshAxis, kMeshAxes>;
inline constexpr MeshOrder kDefaultMeshOrder = {MeshAxis::kTp, MeshAxis::kPp, MeshAxis::kDp};

// An enum value's name on the command line (and in DTUNE_TRAIN_<NAME>) and in the results file.
template <class E>
struct EnumName {
  E value;
  std::string_view name;
};
inline constexpr EnumName<Precision> kPrecisionNames[] = {{Precision::kFp32, "fp32"},
                                                          {Precision::kTf32, "tf32"},
                                                          {Precision::kFp16, "fp16"},
                                                          {Precision::kBf16, "bf16"}};
inline constexpr EnumName<WeightsDtype> kWeightsDtypeNames[] = {{WeightsDtype::kFp32, "fp32"},
                                                                {WeightsDtype::kBf16, "bf16"}};
inline constexpr EnumName<OptimizerKind> kOptimizerNames[] = {{OptimizerKind::kSgd, "sgd"},
                                                              {OptimizerKind::kAdamw, "adamw"}};
inline constexpr EnumName<SyncBackend> kBackendNames[] = {{SyncBackend::kMpi, "mpi"},
                                                          {SyncBackend::kNccl, "nccl"}};
inline constexpr EnumName<ReduceAlgo> kReduceAlgoNames[] = {
    {ReduceAlgo::kFlat, "flat"}, {ReduceAlgo::kHierarchical, "hierarchical"}};
inline constexpr EnumName<Overlap> kOverlapNames[] = {{Overlap::kOn, "on"}, {Overlap::kOff, "off"}};
inline constexpr EnumName<Compression> kCompressionNames[] = {
    {Compression::kNone, "none"}, {Compression::kFp16, "fp16"}, {Compression::kBf16, "bf16"}};
inline constexpr EnumName<DeviceKind> kDeviceNames[] = {{DeviceKind::kCpu, "cpu"},
                                                        {DeviceKind::kCuda, "cuda"}};
inline constexpr EnumName<Schedule> kScheduleNames[] = {{Schedule::kGpipe, "gpipe"},
                                                        {Schedule::k1f1b, "1f1b"},
                                                        {Schedule::kInterleaved, "interleaved"},
                                                        {Schedule::kZbH1, "zb-h1"},
                                                        {Schedule::kZbV, "zb-v"}};
inline constexpr EnumName<PipelineLayout> kPipelineLayoutNames[] = {
    {PipelineLayout::kWithinNode, "within-node"}, {PipelineLayout::kAcrossNodes, "across-nodes"}};
inline constexpr EnumName<PartitionBy> kPartitionNames[] = {{PartitionBy::kFlops, "flops"},
                                                            {PartitionBy::kMeasured, "measured"}};
inline constexpr EnumName<StagePieces> kStagePiecesNames[] = {{StagePieces::kBlocks, "blocks"},
                                                              {StagePieces::kEnds, "ends"}};
inline constexpr EnumName<MeshAxis> kMeshAxisNames[] = {
    {MeshAxis::kTp, "tp"}, {MeshAxis::kPp, "pp"}, {MeshAxis::kDp, "dp"}};
inline constexpr EnumName<ShardMode> kShardNames[] = {{ShardMode::kNone, "none"},
                                                      {ShardMode::kZero1, "zero1"},
                                                      {ShardMode::kZero2, "zero2"},
                                                      {ShardMode::kZero3, "zero3"}};

// Every name in a table, in its order (the choices a flag accepts).
template <class E, std::size_t N>
std::vector<std::string> enum_names(const EnumName<E> (&table)[N]) {
  std::vector<std::string> out;
  for (const auto& e : table) out.emplace_back(e.name);
  return out;
}
// The value named `name`, which the caller checked is in the table (else the first entry).
template <class E, std::size_t N>
E enum_value(const EnumName<E> (&table)[N], std::string_view name) {
  for (const auto& e : table)
    if (e.name == name) return e.value;
  return table[0].value;
}
// The name of `value` ("?" if the table lacks it).
template <class E, std::size_t N>
std::string enum_name(const EnumName<E> (&table)[N], E value) {
  for (const auto& e : table)
    if (e.value == value) return std::string(e.name);
  return "?";
}

// --pipeline-stages (--pp) P > 1: world = data-parallel groups D x P, laid out by the mesh
// (train/mesh.h). `layout` is --pipeline-layout, the older spelling of two mesh orders:
// within-node, a pipeline is P consecutive ranks (stage = rank mod P: --mesh-order tp,pp,dp);
// across-nodes, a stage is D consecutive ranks (stage = rank / D: tp,dp,pp), so each pipeline hop
// crosses nodes while data-parallel groups stay on one.
struct PipelineOptions {
  int stages = 1;         // P; 1: data parallelism only, nothing below applies
  int micro_batches = 1;  // M per optimizer step (= Options::accum_steps when P > 1)
  Schedule schedule = Schedule::k1f1b;
  int virtual_stages = 1;  // V model chunks per rank (interleaved)
  PipelineLayout layout = PipelineLayout::kWithinNode;
  PartitionBy partition = PartitionBy::kFlops;
  StagePieces pieces = StagePieces::kBlocks;
  double debug_chunk_sleep_ms = 0;  // test only: each chunk's forward sleeps this, backward 2x
};

struct Options {
  std::string model = "gpt2-tiny";
  models::ModelOptions model_options;
  int64_t batch = 8;         // per rank; 0 with batch_auto
  int64_t global_batch = 0;  // when given: batch = global / (ranks × accum)
  bool batch_auto = false;
  bool batch_sweep = false;  // with batch_auto: measure powers of two up to the largest batch
  int accum_steps = 1;
  Precision precision = Precision::kFp32;
  WeightsDtype weights_dtype = WeightsDtype::kFp32;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  double lr = 1e-3;
  int steps = 10;
  int warmup_steps = 2;
  int threads = 0;  // 0: cores on this node / ranks on this node
  bool channels_last = false;
  uint64_t seed = 1234;
  std::string output;      // empty: no HDF5 file (--no-output)
  bool overwrite = false;  // --overwrite: replace an existing output file
  DeviceKind device = DeviceKind::kCpu;
  SyncBackend backend = SyncBackend::kMpi;
  ReduceAlgo reduce_algo = ReduceAlgo::kFlat;
  double bucket_mb = 25;
  double first_bucket_mb = 1;
  Overlap overlap = Overlap::kOn;
  Compression compression = Compression::kNone;
  int local_sgd_every = 0;  // > 0: no per-step sync, average parameters every H steps
  ShardMode shard = ShardMode::kNone;
  bool reshard_after_forward = true;  // zero3: free each unit after its forward
  std::string shard_unit = "block";   // zero3: --shard-unit as given, "block" or a size in MiB
  double shard_unit_mib = 0;          // zero3: > 0: units of that many MiB; 0: by block
  int shard_prefetch = 1;             // zero3: units gathered ahead of the one in use
  int check_every = 0;                // divergence guard period (0: only at the end)
  double memory_limit_mb = 0;         // CPU batch finder
  double peak_tflops = 0;             // override of the MFU peak
  std::string peak_from;  // a dtune-probe gemm file for the MFU peak (train/measured_peak.h)
  double timeout_s = 300;
  bool timing = true;       // false: only each step's total (to measure the harness's own cost)
  int plant_inf_step = -1;  // test only: rank 0 plants an inf gradient at this step
  int plant_inf_rank = 0;
  int perturb_rank = -1;           // test only: this rank's parameters drift after the first step
  std::string tensorboard_dir;     // per-step scalars as TensorBoard event files (DIR/rank<r>/)
  bool mllog = false;              // MLPerf-style :::MLLOG lines from rank 0
  std::string data = "synthetic";  // or a dataset: directory or s3://bucket/prefix
  int workers = 2;                 // loader threads
  int prefetch = 4;                // batches built ahead
  bool strict = false;             // a bad sample is an error
  std::string decode = "roi";      // JPEG: "roi" (around the crop box) or "full"
  bool fast_decode = false;        // JPEG: DCT-scaled where the crop box allows (other pixels)
  std::string cache_dir;           // node-local cache tier (empty: none)
  double cache_mb = 8192;          // its capacity
  double cache_block_mb = 8;       // its fetch unit
  int profile_first = 0;           // --profile-steps START:COUNT (COUNT 0: off)
  int profile_steps = 0;
  std::string profile_dir = "results/dtune-profile";  // per-rank Chrome traces, under results/
  int profile_top = 15;                               // rows of the operator table printed
  std::string dump_path;       // test only: rank 0 writes final parameters and last gradients
  std::string checksums_path;  // test only: each rank's parameter checksum after every step
  PipelineOptions pipeline;
  // The device mesh (train/mesh.h): --tp (1 until tensor parallelism exists; pp is
  // pipeline.stages and dp the ranks left) and --mesh-order, innermost axis first.
  int tp = 1;
  MeshOrder mesh_order = kDefaultMeshOrder;
  std::string command_line;
};

// What the data source did during a run (per rank; summed over ranks in the results).
struct DataSummary {
  std::string source;  // "synthetic" or the dataset's description
  int64_t samples, bad, bytes, requests, retries;
  double fetch_ms, decode_ms, wait_ms;
  int64_t cache_hits = 0, cache_misses = 0, cache_hit_bytes = 0, cache_miss_bytes = 0,
          cache_evictions = 0;
  int64_t undecodable = 0, truncated = 0;  // bad, by cause
  int64_t batches = 0;                     // delivered: samples / batches is the samples per batch
  double jpeg_ms = 0;                      // of decode_ms: the JPEG decoder alone
  int64_t coef_bytes = 0;                  // DCT coefficient bytes inverse-transformed

  // Adds another rank's counts and times (the source stays this one's).
  DataSummary& operator+=(const DataSummary& b) {
    samples += b.samples, bad += b.bad, bytes += b.bytes, requests += b.requests;
    retries += b.retries, fetch_ms += b.fetch_ms, decode_ms += b.decode_ms, wait_ms += b.wait_ms;
    cache_hits += b.cache_hits, cache_misses += b.cache_misses;
    cache_hit_bytes += b.cache_hit_bytes, cache_miss_bytes += b.cache_miss_bytes;
    cache_evictions += b.cache_evictions, undecodable += b.undecodable, truncated += b.truncated;
    batches += b.batches, jpeg_ms += b.jpeg_ms, coef_bytes += b.coef_bytes;
    return *this;
  }

  // The numbers, in the order of kDataSummaryFields (their names in the results file).
  std::vector<double> numbers() const {
    return {static_cast<double>(samples),
            static_cast<double>(bad),
            static_cast<double>(bytes),
            static_cast<double>(requests),
            static_cast<double>(retries),
            fetch_ms,
            decode_ms,
            wait_ms,
            static_cast<double>(cache_hits),
            static_cast<double>(cache_misses),
            static_cast<double>(cache_hit_bytes),
            static_cast<double>(cache_miss_bytes),
            static_cast<double>(cache_evictions),
            static_cast<double>(undecodable),
            static_cast<double>(truncated),
            static_cast<double>(batches),
            jpeg_ms,
            static_cast<double>(coef_bytes)};
  }
};
inline constexpr std::array<const char*, 18> kDataSummaryFields = {
    "data_samples",    "data_bad_samples", "data_bytes",      "data_requests",    "data_retries",
    "data_fetch_ms",   "data_decode_ms",   "data_wait_ms",    "cache_hits",       "cache_misses",
    "cache_hit_bytes", "cache_miss_bytes", "cache_evictions", "data_undecodable", "data_truncated",
    "data_batches",    "data_jpeg_ms",     "data_coef_bytes"};

inline std::string to_string(Precision v) { return enum_name(kPrecisionNames, v); }
inline std::string to_string(WeightsDtype v) { return enum_name(kWeightsDtypeNames, v); }
inline std::string to_string(OptimizerKind v) { return enum_name(kOptimizerNames, v); }
inline std::string to_string(SyncBackend v) { return enum_name(kBackendNames, v); }
inline std::string to_string(ReduceAlgo v) { return enum_name(kReduceAlgoNames, v); }
inline std::string to_string(Overlap v) { return enum_name(kOverlapNames, v); }
inline std::string to_string(Compression v) { return enum_name(kCompressionNames, v); }
inline std::string to_string(DeviceKind v) { return enum_name(kDeviceNames, v); }
inline std::string to_string(Schedule v) { return enum_name(kScheduleNames, v); }
inline std::string to_string(PipelineLayout v) { return enum_name(kPipelineLayoutNames, v); }
inline std::string to_string(ShardMode v) { return enum_name(kShardNames, v); }
inline std::string to_string(MeshAxis v) { return enum_name(kMeshAxisNames, v); }
// "tp,pp,dp": --mesh-order's spelling.
inline std::string to_string(const MeshOrder& order) {
  std::string s;
  for (MeshAxis a : order) {
    if (!s.empty()) s += ',';
    s += to_string(a);
  }
  return s;
}
inline std::string to_string(PartitionBy v) { return enum_name(kPartitionNames, v); }
inline std::string to_string(StagePieces v) { return enum_name(kStagePiecesNames, v); }

}  // namespace dtune::train
