// -J FILE: the JSON file nccl-tests writes (schema version 3, NVIDIA/nccl-tests src/util.cu), so
// that tools which read nccl-tests' JSON (its tools/analyze_perf_json.py among them) read dtune's.
// nccl-tests has one binary per collective, so one file holds one collective; a dtune run with
// several collectives writes one file per collective (json_paths).
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "benchmarks/comm/options.h"
#include "benchmarks/comm/summary.h"
#include "benchmarks/comm/types.h"

namespace dtune::comm {

// nccl-tests' per-iteration summary (src/util.cu computeIterStats): over the sorted times,
// p50 = sorted[n/2], p95/p99 the nearest rank min(n-1, ceil(n q/100) - 1), stdev the population
// one (divided by n). Units are those of the input.
struct IterStats {
  double min = 0, max = 0, avg = 0, p50 = 0, p95 = 0, p99 = 0, stdev = 0;
};
IterStats nccl_tests_iter_stats(std::span<const double> times);

// The file of each collective: `path` itself for one collective; for several, "-<collective>"
// inserted before the ".json" suffix ("r.json" -> "r-allreduce.json", "r-allgather.json").
std::vector<std::string> json_paths(const std::string& path, const std::vector<Collective>& cs);

// Creates `path` only if it does not exist; when it does, tries path.0, path.1, ... as nccl-tests'
// jsonOutputInit does (fopen "wx"), and returns the name it created. Throws UsageError naming
// `flag` when the directory cannot be written.
std::string claim_json_path(const std::string& path, const std::string& flag);

// One rank's line of nccl-tests' "devices" list (src/util.cu jsonRankInfo).
struct JsonDevice {
  int rank = 0, group = 0, pid = 0;
  std::string hostname;  // up to the first '.', as nccl-tests' getHostName
  int device = -1;       // CUDA ordinal; -1 for host buffers
  std::string device_hex, device_info;
};
// From dtune's device string: "cuda:0 NVIDIA H200 (0000:1b:00.0)" -> device 0, device_info
// "NVIDIA H200", device_hex "0000:1b:00" (nccl-tests prints domain:bus:device); "cpu" -> -1, "",
// "cpu".
JsonDevice make_json_device(int rank, int pid, const std::string& host, const std::string& device);

// "NCCL 2.27.3" -> 22703, NCCL's version code (NCCL_VERSION(X, Y, Z) = X*10000 + Y*100 + Z from 2.9
// on); 0 when `version` is empty (the mpi backend).
int nccl_version_code(const std::string& version);

// Rank 0's writer: one document per collective, kept in memory and written when the collective's
// last configuration is done. Files claimed but never written (an error, or an interrupt before
// their collective) are removed by the destructor.
class NcclTestsJson {
 public:
  // `paths`: the claimed files (claim_json_path), one per collective of `o`.
  NcclTestsJson(const Options& o, std::vector<std::string> paths);
  NcclTestsJson(const NcclTestsJson&) = delete;
  NcclTestsJson& operator=(const NcclTestsJson&) = delete;
  ~NcclTestsJson();

  const std::vector<std::string>& paths() const { return paths_; }
  // Known once every rank has reported its host and device (provenance).
  void set_run_info(const std::vector<JsonDevice>& devices, int nccl_version);
  void begin(Collective c);
  // One size: the row as the table prints it, with every rank's samples.
  void add(const SizeSummary& r);
  void finish();  // writes the file of the collective begun last

 private:
  nlohmann::ordered_json placement(const SizeSummary::PerPlacement& p, bool checked) const;
  nlohmann::ordered_json per_iter(const std::vector<RankSample>& samples, size_t pi) const;

  const Options& o_;
  std::vector<std::string> paths_;
  std::vector<bool> written_;
  nlohmann::ordered_json devices_;
  int nccl_version_ = 0;
  int current_ = -1;
  std::string start_time_;
  nlohmann::ordered_json results_;
  int out_of_bounds_ = 0;
  double busbw_sum_ = 0;
  int busbw_count_ = 0;
};

}  // namespace dtune::comm
