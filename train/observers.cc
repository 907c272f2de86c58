// The monitor, profiler and TensorBoard observers.
#include "train/observers.h"

#include <filesystem>

namespace dtune::train {

MonitorObserver::MonitorObserver(RunMonitor& monitor, int64_t batch, const StepStrategy& strategy)
    : monitor_(monitor), strategy_(strategy) {
  monitor_.begin_run(batch);
}

void MonitorObserver::begin_step(int step, StepRecord&) {
  // The whole step, its communication included, within --timeout.
  armed_ = monitor_.arm(strategy_.describe_step(step));
}

void MonitorObserver::end_step(int, const StepRecord& rec, TrainOutcome& out) {
  out.interrupted = monitor_.exchange(rec);
  armed_.disarm();
  monitor_.record(rec);
}

void ProfilerObserver::begin_step(int step, StepRecord& rec) {
  profiler_.begin_step(step);
  rec.profiled = profiler_.in_window(step);
}

void ProfilerObserver::end_step(int step, const StepRecord&, TrainOutcome&) {
  profiler_.end_step(step);
}

TensorBoardObserver::TensorBoardObserver(const std::string& dir, int rank, double global_batch,
                                         bool loss_scaling)
    : writer_((std::filesystem::path(dir) / ("rank" + std::to_string(rank))).string(),
              "--tensorboard"),
      global_batch_(global_batch),
      loss_scaling_(loss_scaling) {}

void TensorBoardObserver::end_step(int step, const StepRecord& rec, TrainOutcome&) {
  writer_.scalar("loss", step, static_cast<float>(rec.loss));
  writer_.scalar("step_time_ms", step, static_cast<float>(rec.total_ms));
  writer_.scalar("samples_per_s", step, static_cast<float>(global_batch_ / (rec.total_ms / 1e3)));
  if (loss_scaling_) writer_.scalar("loss_scale", step, static_cast<float>(rec.loss_scale));
  for (size_t ph = 0; ph < kPhases; ++ph)
    writer_.scalar(std::string("phase/") + kPhaseNames[ph], step,
                   static_cast<float>(rec.phases[ph]));
  writer_.flush();
}

}  // namespace dtune::train
