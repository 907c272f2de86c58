// The replay of one FSDP step on every rank (fsdp_replay.h).
#include "benchmarks/comm/fsdp_replay.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "benchmarks/comm/check.h"
#include "benchmarks/comm/fsdp_summary.h"
#include "core/deadline.h"
#include "core/error.h"
#include "core/signals.h"

namespace dtune::comm {
namespace {

// Rank 0's watchdog fires first, so that it saves the results file before any abort (driver.cc).
constexpr double kWatchdogGraceS = 2.0;

// The watchdog's and a refusal's name for one call: "call 4 (backward all-gather of unit h.1,
// 793088 B, in-place)".
std::string describe(const FsdpPlan& plan, size_t i) {
  const FsdpCall& c = plan.calls[i];
  return "call " + std::to_string(i) + " (" + to_string(c.phase) + " " +
         to_string(c.shape.collective) + " of unit " + plan.units[c.unit].name + ", " +
         std::to_string(c.shape.bytes) + " B, " + to_string(c.placement) + ")";
}

class Replay {
 public:
  Replay(const FsdpPlan& plan, const Options& o, ReplayParts parts)
      : plan_(plan), o_(o), p_(parts), samples_(plan.calls.size()) {}

  std::optional<std::vector<RankSample>> run() {
    for (size_t i = 0; i < plan_.calls.size(); ++i)
      if (!p_.backend.supports(plan_.calls[i].shape, plan_.calls[i].placement))
        throw UsageError("--pattern fsdp: the " + p_.backend.name() + " backend cannot run " +
                         describe(plan_, i) + ": give a smaller --shard-unit");
    if (p_.ctx.rank() == o_.hang_rank) std::this_thread::sleep_for(std::chrono::hours(24 * 365));
    std::vector<double> one;
    for (int k = 0; k < o_.warmup_iters; ++k) {
      if (arrive("warm-up step " + std::to_string(k))) return std::nullopt;
      for (size_t i = 0; i < plan_.calls.size(); ++i) call(i, one);
    }
    for (int k = 0; k < o_.iters; ++k) {
      if (arrive("timed step " + std::to_string(k))) return std::nullopt;
      for (size_t i = 0; i < plan_.calls.size(); ++i) {
        // --gap-us: every call starts cold, the sleep outside its timing.
        if (o_.gap_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(o_.gap_us));
        call(i, one);
        samples_[i].placement[index(i)].times_us.push_back(one.at(0));
      }
    }
    for (size_t i = 0; i < plan_.calls.size(); ++i) samples_[i].placement[index(i)].run = true;
    for (int k = 0; k < o_.check_iters; ++k) {
      if (arrive("check step " + std::to_string(k))) return std::nullopt;
      for (size_t i = 0; i < plan_.calls.size(); ++i) check(i);
    }
    return std::move(samples_);
  }

 private:
  size_t index(size_t i) const { return placement_index(plan_.calls[i].placement); }

  double watchdog_s() const { return o_.timeout_s + (p_.ctx.is_root() ? 0.0 : kWatchdogGraceS); }

  // Every rank reached the next step (or asked to stop).
  bool arrive(const std::string& what) {
    p_.board.reach(++p_.step);
    return p_.arrival.arrive("FSDP " + what, o_.timeout_s, stop_requested());
  }

  // One call, its time in out[0]; every call waits under the watchdog for at most --timeout.
  void call(size_t i, std::vector<double>& out) {
    const FsdpCall& c = plan_.calls[i];
    const DeadlineGuard guard(p_.watchdog, watchdog_s(), describe(plan_, i));
    p_.backend.run(c.shape, c.placement, 1, o_.blocking, Deadline::after_s(o_.timeout_s).at(), out);
  }

  // One check call on fresh check data, its wrong elements added to the call's count.
  void check(size_t i) {
    const FsdpCall& c = plan_.calls[i];
    const OpShape& s = c.shape;
    const int rank = p_.ctx.rank();
    const CheckImages img = make_check_images(s, c.placement, rank, rank == o_.plant_wrong_rank);
    p_.backend.upload(img.send.data(), img.send.size(), img.recv.data(), img.recv.size());
    std::vector<double> scratch;
    {
      const DeadlineGuard guard(p_.watchdog, watchdog_s(), "checking " + describe(plan_, i));
      p_.backend.run(s, c.placement, 1, Blocking::kYes, Deadline::after_s(o_.timeout_s).at(),
                     scratch);
    }
    std::vector<uint8_t> result(std::max(s.send_count, s.recv_count) * dtype_size(s.dtype));
    p_.backend.download_recv(result.data(), result.size());
    auto& mp = samples_[i].placement[index(i)];
    mp.checked = true;
    mp.wrong += count_wrong(s, c.placement, rank, result, p_.backend.result_offset(s, c.placement));
  }

  const FsdpPlan& plan_;
  const Options& o_;
  ReplayParts p_;
  std::vector<RankSample> samples_;  // by call
};

}  // namespace

std::optional<std::vector<RankSample>> replay_fsdp_step(const FsdpPlan& plan, const Options& o,
                                                        ReplayParts parts) {
  return Replay(plan, o, parts).run();
}

}  // namespace dtune::comm
