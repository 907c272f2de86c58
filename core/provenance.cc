// Provenance collection (collective) and its HDF5 form.
#include "core/provenance.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>

#include "core/build_info.h"
#include "core/device_info.h"
#include "core/gather.h"
#include "core/h5.h"
#include "core/node_map.h"
#include "core/redact.h"

extern char** environ;

namespace dtune {

const std::vector<std::string>& recorded_env_prefixes() {
  static const std::vector<std::string> kPrefixes = {
      "NCCL_", "UCX_", "OMPI_", "SLURM_", "OMP_", "PMIX_", "CUDA_VISIBLE_DEVICES", "DTUNE_"};
  return kPrefixes;
}

std::vector<std::pair<std::string, std::string>> recorded_environment() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = kv.substr(0, eq);
    for (const auto& p : recorded_env_prefixes()) {
      if (name.rfind(p, 0) == 0) {
        out.emplace_back(name, recordable_env_value(name, kv.substr(eq + 1)));
        break;
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string iso8601_utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[80];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
}

Provenance collect_provenance(const RunContext& ctx, const std::string& command_line,
                              const std::string& device, const std::string& nccl_version) {
  Provenance p;
  p.command_line = strip_url_userinfo(command_line);
  p.start_time = iso8601_utc_now();
  p.world_size = ctx.world_size();
  p.rank_host = gather_strings(ctx.comm(), ctx.host());
  p.rank_device = gather_strings(ctx.comm(), device);
  p.rank_local_rank = gather_longs(ctx.comm(), {static_cast<long long>(ctx.local_rank())});
  p.rank_node.assign(ctx.rank_node().begin(), ctx.rank_node().end());
  p.nodes = ctx.node_count();
  p.rank_boot_id = gather_strings(ctx.comm(), boot_id());
  p.env = recorded_environment();
  p.mpi_library_version = mpi_library_version();
  p.mpi_standard_version = mpi_standard_version();
  p.nccl_version = nccl_version;
  const DeviceSummary dev = query_device_summary();
  p.cuda_runtime_version = dev.cuda_runtime_version;
  p.cuda_driver_version = dev.cuda_driver_version;
  if (ctx.is_root()) p.topology = detect_topology();
  return p;
}

void write_provenance(hid_t file, const Provenance& p) {
  h5::Handle g = h5::create_group(file, "provenance");
  h5::write_attr(g.get(), "command_line", p.command_line);
  h5::write_attr(g.get(), "start_time", p.start_time);
  h5::write_attr(g.get(), "world_size", p.world_size);
  h5::write_attr(g.get(), "nodes", p.nodes);
  h5::write_attr(g.get(), "git_revision", build_info::git_revision());
  h5::write_attr(g.get(), "git_dirty", static_cast<int64_t>(build_info::git_dirty()));
  h5::write_attr(g.get(), "compiler", build_info::compiler());
  h5::write_attr(g.get(), "build_type", build_info::build_type());
  h5::write_attr(g.get(), "libtorch_version", build_info::libtorch_version());
  h5::write_attr(g.get(), "mpi_library_version", p.mpi_library_version);
  h5::write_attr(g.get(), "mpi_standard_version", p.mpi_standard_version);
  h5::write_attr(g.get(), "nccl_version", p.nccl_version);
  h5::write_attr(g.get(), "cuda_runtime_version", p.cuda_runtime_version);
  h5::write_attr(g.get(), "cuda_driver_version", p.cuda_driver_version);
  h5::write_strings(g.get(), "rank_host", p.rank_host);
  h5::write_strings(g.get(), "rank_device", p.rank_device);
  std::vector<int64_t> local(p.rank_local_rank.begin(), p.rank_local_rank.end());
  h5::write_dataset(g.get(), "rank_local_rank", {local.size()}, local.data());
  std::vector<int64_t> node(p.rank_node.begin(), p.rank_node.end());
  h5::write_dataset(g.get(), "rank_node", {node.size()}, node.data());
  h5::write_strings(g.get(), "rank_boot_id", p.rank_boot_id);
  h5::write_attr(g.get(), "topology", p.topology.summary());
  write_topology(g.get(), "topology", p.topology);
  h5::Handle env = h5::create_group(g.get(), "env");
  for (const auto& [k, v] : p.env) h5::write_attr(env.get(), k, v);
}

}  // namespace dtune
