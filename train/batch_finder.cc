// The batch finder's search and agreement.
#include "train/batch_finder.h"

#include <string>

#include "core/error.h"
#include "core/progress.h"
#include "train/trainer.h"

namespace dtune::train {

int64_t find_batch(const Options& o, const MainArgs& a, RunMonitor& monitor) {
  // Each probe is a few training steps at one batch, which on a large model takes seconds: rank 0
  // says what it probes (core/progress.h: on a terminal, or with DTUNE_PROGRESS=1).
  Progress progress("dtune-train: --batch auto", "probes", 0,
                    a.ctx.is_root() ? ProgressMode::kAuto : ProgressMode::kNever);
  auto fits = [&](int64_t b) {
    progress.say("probing batch " + std::to_string(b));
    try {
      run_training(o, a, b, RunMode::kProbe, nullptr);
      progress.say("batch " + std::to_string(b) + " fits");
      return true;
    } catch (const OutOfMemory&) {
      progress.say("batch " + std::to_string(b) + " does not fit");
      return false;
    }
  };
  constexpr int64_t kMaxBatch = 1 << 16;
  if (!fits(1))
    throw UsageError(
        "--batch auto: even batch 1 does not fit" +
        std::string(o.device == DeviceKind::kCpu ? " in --memory-limit-mb" : " on the GPU"));
  int64_t lo = 1;  // fits
  while (lo < kMaxBatch && fits(lo * 2)) lo *= 2;
  int64_t hi = lo * 2;  // does not fit (or the cap)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  long long mine = lo, agreed = lo;
  const auto armed = monitor.arm("--batch auto: the ranks' agreement on the batch");
  DTUNE_MPI_CHECK(MPI_Allreduce(&mine, &agreed, 1, MPI_LONG_LONG, MPI_MIN, a.ctx.comm()));
  return agreed;
}

}  // namespace dtune::train
