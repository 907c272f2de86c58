// nccl-tests' JSON output, field by field as NVIDIA/nccl-tests src/util.cu writes it
// (JSON_FILE_VERSION 3): key names and order, booleans written as the strings "true"/"false" (its
// jsonBool), NaN as the string "nan" (jsonDouble), root as a "%6i" string, null for what was not
// measured or not checked.
#include "benchmarks/comm/nccl_tests_json.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/redact.h"

extern char** environ;

namespace dtune::comm {
namespace {

using Json = nlohmann::ordered_json;

// src/util.cu TIME_STRING_FORMAT, local time (formatNow).
std::string now_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// src/util.cu jsonBool: the strings "true" and "false", not JSON booleans.
Json bool_text(bool v) { return v ? "true" : "false"; }

// src/util.cu jsonDouble: a number, or the string "nan" (printf's text for any non-finite value).
Json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

}  // namespace

IterStats nccl_tests_iter_stats(std::span<const double> times) {
  IterStats s;
  const int n = static_cast<int>(times.size());
  if (n == 0) return s;
  std::vector<double> sorted(times.begin(), times.end());
  std::sort(sorted.begin(), sorted.end());
  const auto nearest = [n](int q) { return std::min(n - 1, (n * q + 99) / 100 - 1); };
  s.min = sorted.front();
  s.max = sorted.back();
  s.p50 = sorted[static_cast<size_t>(n / 2)];
  s.p95 = sorted[static_cast<size_t>(nearest(95))];
  s.p99 = sorted[static_cast<size_t>(nearest(99))];
  double sum = 0;
  for (double t : sorted) sum += t;
  s.avg = sum / n;
  double var = 0;
  for (double t : sorted) var += (t - s.avg) * (t - s.avg);
  s.stdev = std::sqrt(var / n);
  return s;
}

std::vector<std::string> json_paths(const std::string& path, const std::vector<Collective>& cs) {
  if (cs.size() == 1) return {path};
  const std::string stem = path.substr(0, path.size() - 5), ext = path.substr(path.size() - 5);
  std::vector<std::string> out;
  for (Collective c : cs) out.push_back(stem + "-" + to_string(c) + ext);
  return out;
}

std::string claim_json_path(const std::string& path, const std::string& flag) {
  std::string candidate = path;
  for (int n = 0;; ++n) {
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
      ::close(fd);
      return candidate;
    }
    if (errno != EEXIST)
      throw UsageError(flag + " " + candidate + ": cannot create (" + std::strerror(errno) +
                       "): choose a writable directory");
    candidate = path + "." + std::to_string(n);
  }
}

JsonDevice make_json_device(int rank, int pid, const std::string& host, const std::string& device) {
  JsonDevice d;
  d.rank = rank;
  d.pid = pid;
  d.hostname = host.substr(0, host.find('.'));
  d.device_info = device;
  if (device.rfind("cuda:", 0) != 0) return d;
  const size_t space = device.find(' ');
  d.device = std::atoi(device.substr(5, space - 5).c_str());
  d.device_info = space == std::string::npos ? "" : device.substr(space + 1);
  const size_t open = d.device_info.rfind(" (");
  if (open != std::string::npos && d.device_info.back() == ')') {
    std::string bus = d.device_info.substr(open + 2, d.device_info.size() - open - 3);
    d.device_info.resize(open);
    d.device_hex = bus.substr(0, bus.rfind('.'));  // "%04x:%02x:%02x": no PCI function
  }
  return d;
}

int nccl_version_code(const std::string& version) {
  int major = 0, minor = 0, patch = 0;
  const size_t digit = version.find_first_of("0123456789");
  if (digit == std::string::npos ||
      std::sscanf(version.c_str() + digit, "%d.%d.%d", &major, &minor, &patch) != 3)
    return 0;
  return major * 10000 + minor * 100 + patch;
}

NcclTestsJson::NcclTestsJson(const Options& o, std::vector<std::string> paths)
    : o_(o), paths_(std::move(paths)), written_(paths_.size(), false), devices_(Json::array()) {}

void NcclTestsJson::set_run_info(const std::vector<JsonDevice>& devices, int nccl_version) {
  nccl_version_ = nccl_version;
  devices_ = Json::array();
  // src/util.cu jsonRankInfo.
  for (const auto& d : devices)
    devices_.push_back(Json{{"rank", d.rank},
                            {"group", d.group},
                            {"pid", d.pid},
                            {"hostname", d.hostname},
                            {"device", d.device},
                            {"device_hex", d.device_hex},
                            {"device_info", d.device_info}});
}

NcclTestsJson::~NcclTestsJson() {
  for (size_t i = 0; i < paths_.size(); ++i)
    if (!written_[i]) {
      std::error_code ec;
      std::filesystem::remove(paths_[i], ec);
    }
}

void NcclTestsJson::begin(Collective c) {
  const auto it = std::find(o_.collectives.begin(), o_.collectives.end(), c);
  current_ = static_cast<int>(it - o_.collectives.begin());
  start_time_ = now_text();
  results_ = Json::array();
  out_of_bounds_ = 0;
  busbw_sum_ = 0;
  busbw_count_ = 0;
}

// src/util.cu writeBenchmarkLineBody: {time, alg_bw, bus_bw, nwrong}, nwrong a double summed over
// ranks, or null when nothing was checked (-c 0).
Json NcclTestsJson::placement(const SizeSummary::PerPlacement& p, bool checked) const {
  return Json{{"time", number(p.time_us)},
              {"alg_bw", number(p.algbw_gbps)},
              {"bus_bw", number(p.busbw_gbps)},
              {"nwrong", checked ? number(static_cast<double>(p.wrong)) : Json(nullptr)}};
}

// src/util.cu writePerIterReport with src/common.cu BenchTime: per_process_max_times_us holds one
// row per process (here one rank, one GPU) when there is more than one; times_us is, for every
// iteration, the maximum over those rows (ReduceProcessMaxIterTimes); the statistics summarise
// times_us.
Json NcclTestsJson::per_iter(const std::vector<RankSample>& samples, size_t pi) const {
  const size_t I = static_cast<size_t>(o_.iters);
  std::vector<double> times(I, 0.0);
  Json rows = Json::array();
  for (size_t r = 0; r < samples.size(); ++r) {
    const std::vector<double>& it = samples[r].placement[pi].times_us;
    Json row = Json::array();
    for (size_t i = 0; i < I; ++i) {
      times[i] = r == 0 ? it[i] : std::max(times[i], it[i]);
      row.push_back(number(it[i]));
    }
    rows.push_back(std::move(row));
  }
  const IterStats s = nccl_tests_iter_stats(times);
  Json j{{"skipped_iterations", 0},
         {"min_us", number(s.min)},
         {"max_us", number(s.max)},
         {"avg_us", number(s.avg)},
         {"p50_us", number(s.p50)},
         {"p95_us", number(s.p95)},
         {"p99_us", number(s.p99)},
         {"stdev_us", number(s.stdev)},
         {"cv_pct", number(s.avg > 0 ? s.stdev / s.avg * 100.0 : 0.0)}};
  Json t = Json::array();
  for (double v : times) t.push_back(number(v));
  j["times_us"] = std::move(t);
  if (samples.size() > 1) j["per_process_max_times_us"] = std::move(rows);
  return j;
}

// src/util.cu writeBenchmarkLinePreamble, writeBenchmarkLineBody, writePerIterReport and
// writeBenchmarkLineTerminator, in the order src/common.cu TimeTest calls them.
void NcclTestsJson::add(const SizeSummary& r) {
  const OpShape& s = r.shape;
  char root[16];
  std::snprintf(root, sizeof root, "%6i", s.root);
  Json j{{"size", s.bytes},
         {"count", s.count},
         {"type", nccl_tests_name(s.dtype)},
         {"redop", is_reduction(s.collective) ? to_string(s.op) : "none"},
         {"root", root}};
  static const char* kKeys[2] = {"out_of_place", "in_place"};
  for (size_t pi = 0; pi < 2; ++pi) {
    const auto& p = r.placement[pi];
    if (!p.run) {  // src/util.cu writeBenchMarkLineNullBody: the placement's key, null
      j[kKeys[pi]] = nullptr;
      continue;
    }
    j[kKeys[pi]] = placement(p, p.wrong >= 0);
    if (o_.per_iter_timing) j[std::string(kKeys[pi]) + "_per_iter"] = per_iter(r.samples, pi);
    // src/common.cu CheckData counts one error per rank whose check found wrong elements.
    for (const RankSample& rk : r.samples)
      out_of_bounds_ += rk.placement[pi].checked && rk.placement[pi].wrong > 0;
    busbw_sum_ += p.busbw_gbps;
    ++busbw_count_;
  }
  j["actual_iterations"] = o_.iters;
  j["experiment_name"] = "";
  results_.push_back(std::move(j));
}

void NcclTestsJson::finish() {
  if (current_ < 0 || written_[static_cast<size_t>(current_)]) return;
  Json args = Json::array(), env = Json::array();
  for (const auto& a : o_.args) args.push_back(a);
  // The whole environment, as nccl-tests writes it, but with credentials' values and URL user-info
  // hidden (core/redact.h): a JSON file is shared more freely than a shell.
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    env.push_back(eq == std::string::npos
                      ? kv
                      : kv.substr(0, eq + 1) +
                            recordable_env_value(kv.substr(0, eq), kv.substr(eq + 1)));
  }
  // src/util.cu writeDeviceReport: step_factor or step_bytes, whichever -f/-i chose; "devices" is
  // inside "config". dtune has no aggregation (-m), CUDA graphs (-G), -K or parallel init (-p).
  Json config{{"nthreads", 1},
              {"ngpus", 1},
              {"minimum_bytes", o_.min_bytes},
              {"maximum_bytes", o_.max_bytes}};
  if (o_.step_factor > 1)
    config["step_factor"] = o_.step_factor;
  else
    config["step_bytes"] = o_.step_bytes;
  config["warmup_iters"] = o_.warmup_iters;
  config["iterations"] = o_.iters;
  config["aggregated_iterations"] = 1;
  config["validation"] = o_.check_iters;
  config["graph"] = 0;
  config["blocking_collectives"] = bool_text(o_.blocking == Blocking::kYes);
  config["per_iter_timing"] = bool_text(o_.per_iter_timing);
  config["per_iter_skip"] = 0;
  config["parallel_init"] = bool_text(false);
  config["devices"] = devices_;
  // src/util.cu writeResultFooter: the average is a plain mean of busbw over every measured size
  // and placement; "okay" is "unchecked" (dtune has no NCCL_TESTS_MIN_BW threshold).
  const double avg = busbw_count_ ? busbw_sum_ / busbw_count_ : 0.0;
  Json doc{
      {"version", 3},
      {"start_time", start_time_},
      {"args", std::move(args)},
      {"env", std::move(env)},
      {"nccl_version", nccl_version_},
      {"config", std::move(config)},
      {"results", results_},
      {"out_of_bounds", Json{{"count", out_of_bounds_}, {"okay", bool_text(out_of_bounds_ == 0)}}},
      {"average_bus_bandwidth", Json{{"bandwidth", number(avg)}, {"okay", "unchecked"}}},
      {"errors", Json::array()},  // src/util.cu writeErrors: ncclGetLastError's text, if any
      {"end_time", now_text()}};
  const std::string& path = paths_[static_cast<size_t>(current_)];
  std::ofstream f(path, std::ios::trunc);
  f << doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  f.close();
  if (!f) throw Error("-J/--output_file " + path + ": write failed");
  written_[static_cast<size_t>(current_)] = true;
}

}  // namespace dtune::comm
