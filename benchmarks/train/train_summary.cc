// A training run's summary from its outcome and the slowest rank's step times.
#include "benchmarks/train/train_summary.h"

#include <cmath>
#include <cstdlib>
#include <utility>

namespace dtune::train {

DataSummary data_summary_from_numbers(std::string source, std::span<const double> v) {
  auto n = [&](size_t k) { return static_cast<int64_t>(v[k]); };
  DataSummary d{std::move(source), n(0), n(1), n(2), n(3), n(4), v[5], v[6], v[7]};
  d.cache_hits = n(8), d.cache_misses = n(9), d.cache_hit_bytes = n(10), d.cache_miss_bytes = n(11);
  d.cache_evictions = n(12), d.undecodable = n(13), d.truncated = n(14), d.batches = n(15);
  d.jpeg_ms = v[16], d.coef_bytes = n(17);
  return d;
}

TrainSummary summarize_training(const Options& o, size_t ranks, const TrainOutcome& out,
                                std::span<const double> slowest_ms, const DataSummary& data_total,
                                bool profiled) {
  TrainSummary t;
  t.ranks = ranks;
  t.slowest_ms.assign(slowest_ms.begin(), slowest_ms.end());
  const size_t S = slowest_ms.size(), warmup = static_cast<size_t>(o.warmup_steps);

  // A step takes as long as its slowest rank; throughput is total work over total measured time.
  // Steps in a --profile-steps window run slower; they are left out unless no other step is left.
  for (size_t s = warmup; s < S; ++s) t.unprofiled_left |= !out.steps[s].profiled;
  std::vector<double> step_ms, profiled_ms;
  double measured_ms = 0;
  for (size_t s = 0; s < S; ++s)
    if (out.steps[s].profiled) profiled_ms.push_back(slowest_ms[s]);
  for (size_t s = warmup; s < S; ++s) {
    if (out.steps[s].profiled && t.unprofiled_left) continue;
    step_ms.push_back(slowest_ms[s]);
    measured_ms += step_ms.back();
  }
  t.used_steps = static_cast<int>(step_ms.size());
  for (size_t s = warmup; s < S; ++s) t.skipped += out.steps[s].skipped;
  // A pipeline's P stages and a tensor-parallel group's T ranks share their samples: ranks / (P·T)
  // data-parallel groups each take a batch.
  t.global_batch = static_cast<double>(out.batch) * static_cast<double>(ranks) /
                   (o.pipeline.stages * o.tp) * o.accum_steps;
  t.samples = t.global_batch * static_cast<double>(t.used_steps);
  t.seconds = measured_ms / 1e3;
  t.samples_per_s = t.samples / t.seconds;
  t.tokens_per_s = t.samples_per_s * out.tokens_per_sample;
  t.step_ms = summarize(step_ms);
  t.p90_ms = percentile(step_ms, 90);
  const char* results_dir = std::getenv("DTUNE_RESULTS_DIR");
  const std::string dir = results_dir ? results_dir : "results";
  const CheckedMfu checked =
      checked_mfu(out.training_flops_per_sample, t.samples, t.seconds,
                  peak_candidates(out.gpu, o.precision, o.peak_tflops, o.peak_from, dir, o.threads),
                  resolve_peak(out.gpu, o.precision, o.peak_tflops, o.peak_from, dir, o.threads),
                  static_cast<int>(ranks));
  t.peak = checked.peak;
  t.mfu = checked.mfu;
  t.mfu_valid = checked.valid;
  t.mfu_rejected = checked.rejected;
  t.alt_mfu =
      mfu(out.alt_training_flops_per_sample, t.samples, t.seconds, t.peak, static_cast<int>(ranks));
  if (profiled) {
    t.profile_cost.profiled_p50_ms = summarize(profiled_ms).p50;
    t.profile_cost.unprofiled_p50_ms = t.unprofiled_left ? t.step_ms.p50 : NAN;
    t.profile_cost.overhead =
        t.unprofiled_left ? t.profile_cost.profiled_p50_ms / t.step_ms.p50 - 1 : NAN;
  }
  t.data = data_total;
  t.status = out.interrupted ? "interrupted" : out.diverged.empty() ? "ok" : "diverged";
  return t;
}

}  // namespace dtune::train
