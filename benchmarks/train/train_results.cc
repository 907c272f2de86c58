// Gathering, summarising and writing a training run.
#include "benchmarks/train/train_results.h"

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "benchmarks/train/train_summary.h"
#include "core/error.h"
#include "core/gather.h"
#include "core/stats.h"
#include "train/mesh.h"
#include "train/mfu.h"
#include "train/step_log.h"

namespace dtune::train {
namespace {

// What every rank reported about itself, gathered to rank 0 (index = rank).
struct RankRecords {
  std::vector<long long> peak_memory_bytes;
  std::vector<long long> peak_reserved_bytes;
  std::vector<long long> optimizer_state_bytes;
  std::vector<long long> param_bytes_resident;
  std::vector<long long> grad_bytes_resident;
  std::vector<long long> param_bytes_peak;
  std::vector<long long> grad_bytes_peak;
  std::vector<long long> device_index;
  std::vector<std::string> device_name;
  // Tensor parallelism's collectives per measured step, each rank's, and over one pipeline (the
  // ranks at data-parallel and tensor-parallel coordinate 0, a stage each): the bytes summed (the
  // whole model's), the time of its slowest stage.
  std::vector<long long> tp_comm_bytes;
  std::vector<double> tp_comm_ms;
  // The same by layer, [R x sites] in rank order (TrainOutcome's tp_comm_*_by_layer).
  std::vector<long long> tp_layer_bytes;
  std::vector<double> tp_layer_ms;
  long long tp_pipeline_bytes = 0;
  double tp_pipeline_ms = 0;
};

// Root only: the run's screen (after the steps, which run_monitor printed nothing of).
void print_training(const Options& o, const TrainOutcome& out, const TrainSummary& t,
                    const std::vector<ProfileSummary>& profiles, FILE* f) {
  const size_t S = t.slowest_ms.size();
  // The data-parallel groups: the ranks over the pipeline stages and the tensor-parallel degree.
  const size_t dp = t.ranks / static_cast<size_t>(o.pipeline.stages * o.tp);
  const std::string tp = o.tp > 1 ? " x " + std::to_string(o.tp) + " tensor-parallel" : "";
  if (o.pipeline.stages == 1 && o.tp > 1)
    std::fprintf(f,
                 "# dtune-train: %s, %lld parameters, %zu ranks = %zu data-parallel%s; %zu x batch "
                 "%lld x accum %d = global batch %.0f\n",
                 o.model.c_str(), static_cast<long long>(out.parameters), t.ranks, dp, tp.c_str(),
                 dp, static_cast<long long>(out.batch), o.accum_steps, t.global_batch);
  else if (o.pipeline.stages > 1)
    std::fprintf(f,
                 "# dtune-train: %s, %lld parameters, %zu ranks = %zu data-parallel x %d pipeline "
                 "stages%s; %zu x batch %lld x %d micro-batches = global batch %.0f\n",
                 o.model.c_str(), static_cast<long long>(out.parameters), t.ranks, dp,
                 o.pipeline.stages, tp.c_str(), dp, static_cast<long long>(out.batch),
                 o.accum_steps, t.global_batch);
  else
    std::fprintf(
        f,
        "# dtune-train: %s, %lld parameters, %zu ranks x batch %lld x accum %d = global batch "
        "%.0f\n",
        o.model.c_str(), static_cast<long long>(out.parameters), t.ranks,
        static_cast<long long>(out.batch), o.accum_steps, t.global_batch);
  std::fprintf(
      f,
      "#   precision %s, weights %s, optimizer %s, sync %s (overlap %s, buckets %zu, compression "
      "%s%s%s), "
      "device %s, %d threads/rank\n",
      to_string(o.precision).c_str(),
      o.weights_dtype == WeightsDtype::kBf16 ? "bf16+fp32 master" : "fp32",
      to_string(o.optimizer).c_str(), to_string(o.backend).c_str(), to_string(o.overlap).c_str(),
      out.bucket_bytes.size(), to_string(o.compression).c_str(),
      o.local_sgd_every > 0 ? (", local SGD every " + std::to_string(o.local_sgd_every)).c_str()
                            : "",
      o.shard != ShardMode::kNone ? (", shard " + to_string(o.shard)).c_str() : "",
      out.device_name.c_str(), o.threads);
  std::fprintf(f, "# %-6s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "step", "total_ms",
               "data", "h2d", "forward", "backward", "comm_exp", "optimizer", "scaler", "loss");
  for (size_t s = 0; s < S; ++s) {
    // Rank 0's phases; total is the slowest rank's.
    const auto& ph = out.steps[s].phases;
    std::fprintf(f, "  %-6zu %10.2f %10.3f %10.3f %10.2f %10.2f %10.2f %10.2f %10.3f %10.5f%s%s\n",
                 s, t.slowest_ms[s], ph[0], ph[1], ph[2], ph[3], ph[4], ph[5], ph[6],
                 out.steps[s].loss, s < static_cast<size_t>(o.warmup_steps) ? "  (warm-up)" : "",
                 out.steps[s].skipped ? "  (skipped: inf/NaN gradients)" : "");
  }
  std::fprintf(f, "# throughput %.2f samples/s", t.samples_per_s);
  if (out.tokens_per_sample > 1) std::fprintf(f, ", %.0f tokens/s", t.tokens_per_s);
  std::fprintf(f,
               "; step time p50 %.2f ms, p90 %.2f ms (slowest rank per step, %d measured steps)\n",
               t.step_ms.p50, t.p90_ms, t.used_steps);
  // The convention first, then the other one beside it (models/model.h, FlopCount).
  if (std::isnan(t.mfu))
    std::fprintf(f, "# MFU: n/a (peak %s); %.4g training FLOP/sample by %s", t.peak.source.c_str(),
                 out.training_flops_per_sample, out.flops_formula.c_str());
  else
    std::fprintf(f, "# MFU %.2f%% of %.1f TFLOP/s per device (%s); FLOPs by %s", 100 * t.mfu,
                 t.peak.tflops, t.peak.source.c_str(), out.flops_formula.c_str());
  if (!t.mfu_valid) std::fprintf(f, " [peak rejected: %s]", t.mfu_rejected.c_str());
  if (out.alt_flops_formula.empty())
    std::fprintf(f, "\n");
  else if (std::isnan(t.alt_mfu))
    std::fprintf(f, " (%.4g by %s)\n", out.alt_training_flops_per_sample,
                 out.alt_flops_formula.c_str());
  else
    std::fprintf(f, " (%.2f%% by %s)\n", 100 * t.alt_mfu, out.alt_flops_formula.c_str());
  std::fprintf(f, "# peak memory %.1f MiB on rank 0 (%s)%s\n",
               static_cast<double>(out.peak_memory_bytes) / (1 << 20), out.memory_source.c_str(),
               t.skipped ? (", " + std::to_string(t.skipped) + " skipped steps").c_str() : "");

  const bool real_data = o.data != "synthetic";
  const std::vector<double> d = t.data.numbers();
  // Images: how much of decode the JPEG decoder took, and which way it decoded.
  const std::string jpeg = t.data.coef_bytes > 0
                               ? " (jpeg " + std::to_string(std::lround(t.data.jpeg_ms)) + " ms, " +
                                     o.decode + (o.fast_decode ? " + fast" : "") + ")"
                               : "";
  if (real_data)
    std::fprintf(f,
                 "# data: %s via %d workers/rank; %.0f samples, %.0f bad (skipped), %.1f MB in "
                 "%.0f requests "
                 "(%.0f retries); summed over ranks: fetch %.0f ms, decode %.0f ms%s, wait %.0f "
                 "ms\n",
                 t.data.source.c_str(), o.workers, d[0], d[1], d[2] / 1e6, d[3], d[4], d[5], d[6],
                 jpeg.c_str(), d[7]);
  if (real_data && !o.cache_dir.empty())
    std::fprintf(f,
                 "# cache %s: %.0f hits, %.0f misses (hit rate %.1f%%), %.1f MB from cache, %.1f "
                 "MB fetched, "
                 "%.0f evictions\n",
                 o.cache_dir.c_str(), d[8], d[9], 100 * d[8] / std::max(1.0, d[8] + d[9]),
                 d[10] / 1e6, d[11] / 1e6, d[12]);
  if (!profiles.empty()) {
    std::fflush(f);  // print_profile writes to stdout
    print_profile(profiles, t.profile_cost, static_cast<size_t>(o.profile_top));
  }
  if (out.final_average)
    std::fprintf(
        f,
        "# local SGD: the run ended between averagings; the parameters were averaged once more "
        "after the last step (untimed)\n");
  if (!out.diverged.empty()) std::fprintf(f, "# stopped: %s\n", out.diverged.c_str());
  if (out.interrupted)
    std::fprintf(f, "# stopped: interrupted by a signal after %zu of %d steps\n", S,
                 o.warmup_steps + o.steps);
}

// Rank 0's gradient arrival times, (S, P) with S the steps in the log, and the parameters' sizes
// (P,): the scaling model's profile (train/grad_timer.h). Nothing when no step was timed.
void write_grad_ready(hid_t id, const TrainOutcome& out) {
  const size_t S = out.grad_ready_ms.size(), P = out.param_bytes.size();
  if (S == 0 || P == 0) return;
  std::vector<double> flat;  // (S, P)
  flat.reserve(S * P);
  for (const auto& row : out.grad_ready_ms) flat.insert(flat.end(), row.begin(), row.end());
  h5::write_dataset(id, "grad_ready_ms", {S, P}, flat.data());
  h5::write_dataset(id, "param_bytes", {P}, out.param_bytes.data());
}

// Root only: the summary joins the configuration and the steps in the run's group (StepLog), which
// it closes with the run's status; nothing with --no-output.
void write_training(StepLog& log, const TrainOutcome& out, const TrainSummary& t,
                    const RankRecords& ranks, const std::vector<ProfileSummary>& profiles) {
  log.flush();                   // creates the group if this run was shorter than a flush period
  if (!log.has_group()) return;  // --no-output
  const hid_t id = log.group();
  const size_t R = t.ranks;
  h5::write_attr(id, "parameters", static_cast<int64_t>(out.parameters));
  h5::write_attr(id, "local_sgd_final_average", static_cast<int64_t>(out.final_average));
  h5::write_attr(id, "throughput_steps", t.used_steps);
  h5::write_attr(id, "samples_per_s", t.samples_per_s);
  h5::write_attr(id, "tokens_per_s", t.tokens_per_s);
  h5::write_attr(id, "step_time_p50_ms", t.step_ms.p50);
  h5::write_attr(id, "step_time_p90_ms", t.p90_ms);
  h5::write_attr(id, "skipped_steps", t.skipped);
  h5::write_attr(id, "training_flops_per_sample", out.training_flops_per_sample);
  h5::write_attr(id, "tokens_per_sample", out.tokens_per_sample);
  h5::write_attr(id, "flops_formula", out.flops_formula);
  h5::write_attr(id, "mfu", t.mfu);
  h5::write_attr(id, "alt_training_flops_per_sample", out.alt_training_flops_per_sample);
  h5::write_attr(id, "alt_flops_formula", out.alt_flops_formula);
  h5::write_attr(id, "alt_mfu", t.alt_mfu);
  h5::write_attr(id, "peak_tflops", t.peak.tflops);
  h5::write_attr(id, "peak_source", t.peak.source);
  h5::write_attr(id, "mfu_valid", static_cast<int64_t>(t.mfu_valid ? 1 : 0));
  h5::write_attr(id, "mfu_rejected_peaks", t.mfu_rejected);
  h5::write_attr(id, "memory_source", out.memory_source);
  h5::write_attr(id, "activation_bytes", out.activation_bytes);
  h5::write_attr(id, "recompute_ms_per_step", out.recompute_ms_per_step);
  h5::write_attr(id, "attention_backend", out.attention_backend);
  h5::write_attr(id, "tp_comm_bytes_per_step", static_cast<int64_t>(ranks.tp_pipeline_bytes));
  h5::write_attr(id, "tp_comm_ms_per_step", ranks.tp_pipeline_ms);
  const std::vector<int64_t> tp_bytes(ranks.tp_comm_bytes.begin(), ranks.tp_comm_bytes.end());
  h5::write_dataset(id, "tp_comm_bytes", {R}, tp_bytes.data());
  h5::write_dataset(id, "tp_comm_ms", {R}, ranks.tp_comm_ms.data());
  if (const size_t sites = out.tp_comm_bytes_by_layer.size(); sites > 0) {
    const std::vector<int64_t> layer_bytes(ranks.tp_layer_bytes.begin(),
                                           ranks.tp_layer_bytes.end());
    h5::write_dataset(id, "tp_comm_bytes_by_layer", {R, sites}, layer_bytes.data());
    h5::write_dataset(id, "tp_comm_ms_by_layer", {R, sites}, ranks.tp_layer_ms.data());
  }
  h5::write_attr(id, "data_description", t.data.source);
  const std::vector<double> d = t.data.numbers();
  for (size_t k = 0; k < kDataSummaryFields.size(); ++k)
    h5::write_attr(id, kDataSummaryFields[k], d[k]);
  if (!profiles.empty()) write_profile(id, profiles, t.profile_cost);
  std::vector<int64_t> peak_bytes(ranks.peak_memory_bytes.begin(), ranks.peak_memory_bytes.end());
  h5::write_dataset(id, "peak_memory_bytes", {R}, peak_bytes.data());
  const std::vector<int64_t> reserved(ranks.peak_reserved_bytes.begin(),
                                      ranks.peak_reserved_bytes.end());
  h5::write_dataset(id, "peak_reserved_bytes", {R}, reserved.data());
  std::vector<int64_t> state_bytes(ranks.optimizer_state_bytes.begin(),
                                   ranks.optimizer_state_bytes.end());
  h5::write_dataset(id, "optimizer_state_bytes", {R}, state_bytes.data());
  for (const auto& [name, v] : {std::pair{"param_bytes_resident", &ranks.param_bytes_resident},
                                std::pair{"grad_bytes_resident", &ranks.grad_bytes_resident},
                                std::pair{"param_bytes_peak", &ranks.param_bytes_peak},
                                std::pair{"grad_bytes_peak", &ranks.grad_bytes_peak}}) {
    const std::vector<int64_t> bytes(v->begin(), v->end());
    h5::write_dataset(id, name, {R}, bytes.data());
  }
  h5::write_attr(id, "gathered_bytes_per_step", out.gathered_bytes_per_step);
  h5::write_attr(id, "reduce_scattered_bytes_per_step", out.reduce_scattered_bytes_per_step);
  std::vector<int64_t> buckets(out.bucket_bytes.begin(), out.bucket_bytes.end());
  h5::write_dataset(id, "bucket_bytes", {buckets.size()}, buckets.data());
  write_grad_ready(id, out);
  std::vector<int64_t> device_index(ranks.device_index.begin(), ranks.device_index.end());
  h5::write_dataset(id, "device_index", {R}, device_index.data());
  h5::write_strings(id, "rank_device", ranks.device_name);
  h5::write_dataset(id, "param_checksum", {out.param_checksums.size()}, out.param_checksums.data());
  log.close(t.status, out.diverged);
}

}  // namespace

double report_training(const Options& o, const RunContext& ctx, const TrainOutcome& out,
                       RunMonitor& monitor) {
  RankRecords ranks;
  DataSummary data = data_summary_from_numbers(out.data.source,
                                               std::vector<double>(kDataSummaryFields.size(), 0.0));
  std::vector<ProfileSummary> profiles;
  {
    const auto armed = monitor.arm("gathering the run's results");
    ranks.peak_memory_bytes = gather_longs(ctx.comm(), {out.peak_memory_bytes});
    ranks.peak_reserved_bytes = gather_longs(ctx.comm(), {out.peak_reserved_bytes});
    ranks.optimizer_state_bytes = gather_longs(ctx.comm(), {out.optimizer_state_bytes});
    ranks.param_bytes_resident = gather_longs(ctx.comm(), {out.param_bytes_resident});
    ranks.grad_bytes_resident = gather_longs(ctx.comm(), {out.grad_bytes_resident});
    ranks.param_bytes_peak = gather_longs(ctx.comm(), {out.param_bytes_peak});
    ranks.grad_bytes_peak = gather_longs(ctx.comm(), {out.grad_bytes_peak});
    ranks.device_index = gather_longs(ctx.comm(), {out.device_index});
    ranks.device_name = gather_strings(ctx.comm(), out.device_name);
    ranks.tp_comm_bytes = gather_longs(ctx.comm(), {out.tp_comm_bytes_per_step});
    ranks.tp_comm_ms = gather_doubles(ctx.comm(), {out.tp_comm_ms_per_step});
    const std::vector<long long> layer_bytes(out.tp_comm_bytes_by_layer.begin(),
                                             out.tp_comm_bytes_by_layer.end());
    ranks.tp_layer_bytes = gather_longs(ctx.comm(), layer_bytes);
    ranks.tp_layer_ms = gather_doubles(ctx.comm(), out.tp_comm_ms_by_layer);
    const std::vector<double> data_all = gather_doubles(ctx.comm(), out.data.numbers());
    const std::span<const double> all(data_all);
    for (size_t i = 0; i + kDataSummaryFields.size() <= all.size(); i += kDataSummaryFields.size())
      data += data_summary_from_numbers("", all.subspan(i, kDataSummaryFields.size()));
    if (out.profile.ran) profiles = gather_profiles(ctx.comm(), out.profile);
    if (out.mode) out.mode->gather(ctx);
  }
  // Rank 0 writes disarmed: the watchdog's save must never run beside it.
  double rate = 0.0;
  if (ctx.is_root()) {
    StepLog& log = *monitor.log();
    const size_t S = log.steps(), R = static_cast<size_t>(ctx.world_size());
    const MeshShape mesh =
        make_mesh_shape(static_cast<int>(R), o.tp, o.pipeline.stages, o.mesh_order);
    for (size_t r = 0; r < R; ++r) {
      const auto c = mesh.coords(static_cast<int>(r));
      if (c[static_cast<size_t>(MeshAxis::kDp)] != 0 || c[static_cast<size_t>(MeshAxis::kTp)] != 0)
        continue;
      ranks.tp_pipeline_bytes += ranks.tp_comm_bytes[r];
      ranks.tp_pipeline_ms = std::max(ranks.tp_pipeline_ms, ranks.tp_comm_ms[r]);
    }
    std::vector<double> slowest(S, 0.0);
    for (size_t s = 0; s < S; ++s)
      for (size_t r = 0; r < R; ++r) slowest[s] = std::max(slowest[s], log.at(s, r, kPhases));
    const TrainSummary t = summarize_training(o, R, out, slowest, data, !profiles.empty());
    print_training(o, out, t, profiles, stdout);
    if (out.mode) {
      out.mode->print(stdout);
      log.flush();
      if (log.has_group()) out.mode->write(log.group());
    }
    write_training(log, out, t, ranks, profiles);
    rate = t.samples_per_s;
  }
  const auto armed = monitor.arm("sharing the run's throughput");
  DTUNE_MPI_CHECK(MPI_Bcast(&rate, 1, MPI_DOUBLE, 0, ctx.comm()));
  return rate;
}

void write_partial_mode(RunMonitor& monitor, const ModeResults& mode) {
  StepLog* log = monitor.log();
  if (!log || !log->has_group()) return;
  // Saved once: the watchdog's save and the main thread's must not both write it.
  if (H5Lexists(log->group(), mode.name().c_str(), H5P_DEFAULT) > 0) return;
  try {
    log->flush();
    mode.write_partial(log->group());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtune-train: warning: could not save this rank's %s rows: %s\n",
                 mode.name().c_str(), e.what());
  }
}

void report_oom(const Options& o, const OutOfMemory& e, RunMonitor& monitor,
                std::optional<ResultsFile>& file) {
  std::printf("# dtune-train: %s out of memory at batch %lld per rank: %s\n", o.model.c_str(),
              static_cast<long long>(e.batch), e.what());
  if (!file) return;
  if (StepLog* log = monitor.log(); log && log->has_group() && log->steps() > 0) {
    // Out of memory after some steps completed: their group keeps them, with status oom.
    h5::write_attr(log->group(), "peak_memory_bytes", static_cast<int64_t>(e.peak_bytes));
    log->close("oom", e.what());
    return;
  }
  h5::Handle g = file->new_run("train-" + o.model + "-oom");
  h5::write_attr(g.get(), "benchmark", "train");
  h5::write_attr(g.get(), "status", "oom");
  h5::write_attr(g.get(), "model", o.model);
  h5::write_attr(g.get(), "batch", static_cast<int64_t>(e.batch));
  h5::write_attr(g.get(), "precision", to_string(o.precision));
  h5::write_attr(g.get(), "peak_memory_bytes", static_cast<int64_t>(e.peak_bytes));
  h5::write_attr(g.get(), "message", std::string(e.what()));
  g.close();
  file->flush();
}

}  // namespace dtune::train
