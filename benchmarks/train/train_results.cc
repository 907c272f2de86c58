// Gathering, summarising and writing a training run.
#include "benchmarks/train/train_results.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "train/mfu.h"
#include "train/step_log.h"
#include "core/error.h"
#include "core/gather.h"
#include "core/stats.h"

namespace dtune::train {
namespace {

// What every rank reported about itself, gathered to rank 0 (index = rank).
struct RankRecords {
  std::vector<long long> peak_memory_bytes;
  std::vector<long long> device_index;
  std::vector<std::string> device_name;
};

// Root only: prints the summary, writes the group, returns samples/s.
double write_and_print(const Options& o, const RunContext& ctx, const TrainOutcome& out, StepLog& log,
                       const RankRecords& ranks, const std::vector<ProfileSummary>& profiles,
                       const std::vector<double>& data_sums) {
  const size_t S = log.steps(), R = static_cast<size_t>(ctx.world_size());
  auto at = [&](size_t step, size_t rank, size_t field) { return log.at(step, rank, field); };

  // A step takes as long as its slowest rank; throughput is total work over total measured time.
  // Steps in a --profile-steps window run slower; they are left out unless no other step is left.
  auto slowest = [&](size_t s) {
    double worst = 0;
    for (size_t r = 0; r < R; ++r) worst = std::max(worst, at(s, r, kPhases));
    return worst;
  };
  bool unprofiled_left = false;
  for (size_t s = static_cast<size_t>(o.warmup_steps); s < S; ++s) unprofiled_left |= !out.steps[s].profiled;
  std::vector<double> step_ms, profiled_ms;
  double measured_ms = 0;
  for (size_t s = 0; s < S; ++s)
    if (out.steps[s].profiled) profiled_ms.push_back(slowest(s));
  for (size_t s = static_cast<size_t>(o.warmup_steps); s < S; ++s) {
    if (out.steps[s].profiled && unprofiled_left) continue;
    step_ms.push_back(slowest(s));
    measured_ms += step_ms.back();
  }
  const int used_steps = static_cast<int>(step_ms.size());
  int skipped = 0;
  for (size_t s = static_cast<size_t>(o.warmup_steps); s < S; ++s) skipped += out.steps[s].skipped;
  const double global_batch = static_cast<double>(out.batch) * static_cast<double>(R) * o.accum_steps;
  const double samples = global_batch * static_cast<double>(used_steps);
  const double seconds = measured_ms / 1e3;
  const double samples_per_s = samples / seconds;
  const Summary st = summarize(step_ms);
  const double p90 = percentile(step_ms, 90);
  const Peak peak = peak_for(out.gpu, o.precision, o.peak_tflops);
  const double mfu_value = mfu(out.training_flops_per_sample, samples, seconds, peak, static_cast<int>(R));
  const double alt_mfu = mfu(out.alt_training_flops_per_sample, samples, seconds, peak, static_cast<int>(R));

  // One screen.
  std::printf("# dtune-train: %s, %lld parameters, %zu ranks x batch %lld x accum %d = global batch %.0f\n",
              o.model.c_str(), static_cast<long long>(out.parameters), R, static_cast<long long>(out.batch),
              o.accum_steps, global_batch);
  std::printf("#   precision %s, weights %s, optimizer %s, sync %s (overlap %s, buckets %zu, compression %s%s), "
              "device %s, %d threads/rank\n",
              to_string(o.precision).c_str(), o.weights_dtype == WeightsDtype::kBf16 ? "bf16+fp32 master" : "fp32",
              to_string(o.optimizer).c_str(), to_string(o.backend).c_str(),
              to_string(o.overlap).c_str(), out.bucket_bytes.size(), to_string(o.compression).c_str(),
              o.local_sgd_every > 0 ? (", local SGD every " + std::to_string(o.local_sgd_every)).c_str() : "",
              out.device_name.c_str(), o.threads);
  std::printf("# %-6s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "step", "total_ms", "data", "h2d", "forward",
              "backward", "comm_exp", "optimizer", "scaler", "loss");
  for (size_t s = 0; s < S; ++s) {
    // Rank 0's phases; total is the slowest rank's.
    double worst = 0;
    for (size_t r = 0; r < R; ++r) worst = std::max(worst, at(s, r, kPhases));
    const auto& ph = out.steps[s].phases;
    std::printf("  %-6zu %10.2f %10.3f %10.3f %10.2f %10.2f %10.2f %10.2f %10.3f %10.5f%s%s\n", s, worst, ph[0],
                ph[1], ph[2], ph[3], ph[4], ph[5], ph[6], out.steps[s].loss,
                s < static_cast<size_t>(o.warmup_steps) ? "  (warm-up)" : "",
                out.steps[s].skipped ? "  (skipped: inf/NaN gradients)" : "");
  }
  std::printf("# throughput %.2f samples/s", samples_per_s);
  if (out.tokens_per_sample > 1) std::printf(", %.0f tokens/s", samples_per_s * out.tokens_per_sample);
  std::printf("; step time p50 %.2f ms, p90 %.2f ms (slowest rank per step, %d measured steps)\n", st.p50, p90,
              used_steps);
  // The convention first, then the other one beside it (models/model.h, FlopCount).
  if (std::isnan(mfu_value))
    std::printf("# MFU: n/a (peak %s); %.4g training FLOP/sample by %s", peak.source.c_str(),
                out.training_flops_per_sample, out.flops_formula.c_str());
  else
    std::printf("# MFU %.2f%% of %.1f TFLOP/s per device (%s); FLOPs by %s", 100 * mfu_value, peak.tflops,
                peak.source.c_str(), out.flops_formula.c_str());
  if (out.alt_flops_formula.empty())
    std::printf("\n");
  else if (std::isnan(alt_mfu))
    std::printf(" (%.4g by %s)\n", out.alt_training_flops_per_sample, out.alt_flops_formula.c_str());
  else
    std::printf(" (%.2f%% by %s)\n", 100 * alt_mfu, out.alt_flops_formula.c_str());
  std::printf("# peak memory %.1f MiB on rank 0 (%s)%s\n", static_cast<double>(out.peak_memory_bytes) / (1 << 20),
              out.memory_source.c_str(), skipped ? (", " + std::to_string(skipped) + " skipped steps").c_str() : "");

  const bool real_data = o.data != "synthetic";
  if (real_data)
    std::printf("# data: %s via %d workers/rank; %.0f samples, %.0f bad (skipped), %.1f MB in %.0f requests (%.0f "
                "retries); summed over ranks: fetch %.0f ms, decode %.0f ms, wait %.0f ms\n",
                out.data.source.c_str(), o.workers, data_sums[0], data_sums[1], data_sums[2] / 1e6, data_sums[3],
                data_sums[4], data_sums[5], data_sums[6], data_sums[7]);
  if (real_data && !o.cache_dir.empty())
    std::printf("# cache %s: %.0f hits, %.0f misses (hit rate %.1f%%), %.1f MB from cache, %.1f MB fetched, %.0f "
                "evictions\n",
                o.cache_dir.c_str(), data_sums[8], data_sums[9], 100 * data_sums[8] / std::max(1.0, data_sums[8] + data_sums[9]),
                data_sums[10] / 1e6, data_sums[11] / 1e6, data_sums[12]);
  ProfileOverhead cost;
  if (!profiles.empty()) {
    cost.profiled_p50_ms = summarize(profiled_ms).p50;
    cost.unprofiled_p50_ms = unprofiled_left ? st.p50 : NAN;
    cost.overhead = unprofiled_left ? cost.profiled_p50_ms / st.p50 - 1 : NAN;
    print_profile(profiles, cost, static_cast<size_t>(o.profile_top));
  }
  if (out.final_average)
    std::printf("# local SGD: the run ended between averagings; the parameters were averaged once more "
                "after the last step (untimed)\n");
  if (!out.diverged.empty()) std::printf("# stopped: %s\n", out.diverged.c_str());
  if (out.interrupted)
    std::printf("# stopped: interrupted by a signal after %zu of %d steps\n", S, o.warmup_steps + o.steps);

  const std::string status = out.interrupted ? "interrupted" : out.diverged.empty() ? "ok" : "diverged";
  log.flush();  // creates the group if this run was shorter than a flush period
  if (!log.has_group()) return samples_per_s;  // --no-output
  // The configuration and the steps are in the group already (StepLog); the summary joins them.
  const hid_t id = log.group();
  h5::write_attr(id, "parameters", static_cast<int64_t>(out.parameters));
  h5::write_attr(id, "local_sgd_final_average", static_cast<int64_t>(out.final_average));
  h5::write_attr(id, "throughput_steps", used_steps);
  h5::write_attr(id, "samples_per_s", samples_per_s);
  h5::write_attr(id, "tokens_per_s", samples_per_s * out.tokens_per_sample);
  h5::write_attr(id, "step_time_p50_ms", st.p50);
  h5::write_attr(id, "step_time_p90_ms", p90);
  h5::write_attr(id, "skipped_steps", skipped);
  h5::write_attr(id, "training_flops_per_sample", out.training_flops_per_sample);
  h5::write_attr(id, "tokens_per_sample", out.tokens_per_sample);
  h5::write_attr(id, "flops_formula", out.flops_formula);
  h5::write_attr(id, "mfu", mfu_value);
  h5::write_attr(id, "alt_training_flops_per_sample", out.alt_training_flops_per_sample);
  h5::write_attr(id, "alt_flops_formula", out.alt_flops_formula);
  h5::write_attr(id, "alt_mfu", alt_mfu);
  h5::write_attr(id, "peak_tflops", peak.tflops);
  h5::write_attr(id, "peak_source", peak.source);
  h5::write_attr(id, "memory_source", out.memory_source);
  h5::write_attr(id, "data_description", out.data.source);
  for (size_t k = 0; k < kDataSummaryFields.size(); ++k) h5::write_attr(id, kDataSummaryFields[k], data_sums[k]);
  if (!profiles.empty()) write_profile(id, profiles, cost);
  std::vector<int64_t> peak_bytes(ranks.peak_memory_bytes.begin(), ranks.peak_memory_bytes.end());
  h5::write_dataset(id, "peak_memory_bytes", {R}, peak_bytes.data());
  std::vector<int64_t> buckets(out.bucket_bytes.begin(), out.bucket_bytes.end());
  h5::write_dataset(id, "bucket_bytes", {buckets.size()}, buckets.data());
  std::vector<int64_t> device_index(ranks.device_index.begin(), ranks.device_index.end());
  h5::write_dataset(id, "device_index", {R}, device_index.data());
  h5::write_strings(id, "rank_device", ranks.device_name);
  h5::write_dataset(id, "param_checksum", {out.param_checksums.size()}, out.param_checksums.data());
  log.close(status, out.diverged);
  return samples_per_s;
}

}  // namespace

double report_training(const Options& o, const RunContext& ctx, const TrainOutcome& out, RunMonitor& monitor) {
  RankRecords ranks;
  std::vector<double> data_sums(kDataSummaryFields.size(), 0.0);
  std::vector<ProfileSummary> profiles;
  {
    const auto armed = monitor.arm("gathering the run's results");
    ranks.peak_memory_bytes = gather_longs(ctx.comm(), {out.peak_memory_bytes});
    ranks.device_index = gather_longs(ctx.comm(), {out.device_index});
    ranks.device_name = gather_strings(ctx.comm(), out.device_name);
    const std::vector<double> data_all = gather_doubles(ctx.comm(), out.data.numbers());
    for (size_t i = 0; i < data_all.size(); ++i) data_sums[i % data_sums.size()] += data_all[i];
    if (out.profile.ran) profiles = gather_profiles(ctx.comm(), out.profile);
  }
  // Rank 0 writes disarmed: the watchdog's save must never run beside it.
  double rate = ctx.is_root() ? write_and_print(o, ctx, out, *monitor.log(), ranks, profiles, data_sums) : 0.0;
  const auto armed = monitor.arm("sharing the run's throughput");
  DTUNE_MPI_CHECK(MPI_Bcast(&rate, 1, MPI_DOUBLE, 0, ctx.comm()));
  return rate;
}

void report_oom(const Options& o, const OutOfMemory& e, RunMonitor& monitor, std::optional<ResultsFile>& file) {
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
