// A training run's parts, built once before its first step: the device, the model on it, the loss
// scaler, and what the mode builds (data_parallel_step.h, pipeline/pipeline_step.h): the parameters
// this rank trains with rank 0's values everywhere, the gradient reducer and bucketed sync, the
// fp32 master copy (bf16 weights), the optimizer, the data source, the phase clock and the
// profiler, and the mode's step itself (step_strategy.h). The Trainer (trainer.h) runs steps over
// them; a probe (--batch auto) builds the data-parallel parts for this rank alone, with no
// communication.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/context.h"
#include "models/model.h"
#include "models/pieces.h"
#include "train/config.h"
#include "train/data.h"
#include "train/grad_sync.h"
#include "train/grad_timer.h"
#include "train/local_sgd.h"
#include "train/mesh.h"
#include "train/optimizer.h"
#include "train/param_sharding.h"
#include "train/phase_clock.h"
#include "train/precision.h"
#include "train/reducer.h"
#include "train/step_strategy.h"
#include "train/telemetry/profiler.h"
#include "train/telemetry/trace_log.h"

namespace dtune::train {

class RunMonitor;

// kTrain: the real run. kProbe: this rank alone (no communication), two steps, to learn whether
// `batch` fits; throws OutOfMemory when it does not.
enum class RunMode { kTrain, kProbe };

// The GPU this rank trains on: its local rank modulo the GPUs it sees; -1 for --device cpu. Throws
// UsageError when --device cuda finds no GPU.
int device_ordinal(const Options& o, const RunContext& ctx);

struct TrainSetup {
  // Builds the parts in the order they need each other. kTrain needs `monitor`: the reducer's
  // set-up and the initial broadcast run armed against --timeout. Members are destroyed in the
  // reverse order (the reducer's thread stops before the trace log it writes to goes).
  static std::unique_ptr<TrainSetup> build(const Options& o, const RunContext& ctx, int64_t batch,
                                           RunMode mode, RunMonitor* monitor);
  TrainSetup(const TrainSetup&) = delete;
  TrainSetup& operator=(const TrainSetup&) = delete;

  bool probe() const { return mode == RunMode::kProbe; }

  Options o;  // as run: a probe's are cut to two steps without warm-up, checks or profile
  RunMode mode = RunMode::kTrain;
  int64_t batch = 0;  // per rank per micro-step
  int world = 1;      // ranks that communicate: 1 for a probe
  // The device mesh (a probe's: this rank alone), built once: every degree and peer comes from it.
  std::unique_ptr<DeviceMesh> mesh;
  int ordinal = -1;  // the GPU, -1 on CPU
  torch::Device device{torch::kCPU};
  std::shared_ptr<models::Model> model;
  TraceLog trace_log;
  std::unique_ptr<Reducer> reducer;   // over the data axis; null for a probe
  std::vector<torch::Tensor> params;  // this rank's: the model's, or its pipeline stage's
  // A pipeline stage's pieces and its parameters' names (params in that order): what zero3 cuts
  // its units from. Empty: the whole model's.
  std::vector<models::Piece> stage_pieces;
  std::vector<std::string> stage_param_names;
  std::vector<torch::Tensor>
      master;  // replicated bf16 weights: the fp32 copy the optimizer updates
  std::unique_ptr<Optimizer> optimizer;  // replicated (--shard none)
  std::optional<GradSync> sync;  // over the data axis, when it syncs per step (dp > 1, zero3)
  std::unique_ptr<ParamSharding> sharding;  // how the data axis holds params, grads and state
  std::optional<GradTimer> grad_timer;      // every run but a probe: gradient arrival times
  torch::Tensor bucket_footprint;  // a probe: (Σ parameter bytes,) what the buckets will hold
  std::optional<LossScaler> scaler;
  std::unique_ptr<DataSource> data;
  std::unique_ptr<PhaseClock> clock;
  std::optional<StepProfiler> profiler;  // --profile-steps
  LocalSgdSchedule local_sgd{0, 1};      // --local-sgd (data parallelism)
  // Built last, destroyed first: the mode's step, over the parts above.
  std::unique_ptr<StepStrategy> strategy;

 private:
  TrainSetup() = default;
};

// The parts every mode builds alike, once the mode has set s.params (the whole model's, or its
// pipeline stage's): the reducer over the mesh's data axis and the initial broadcast, which starts
// every data-parallel group from its first rank's parameters and buffers as DDP does (armed on
// `monitor`; a probe has neither), the sharding and its gradient sync (param_sharding.h), the loss
// scaler, the data source (a dataset is loaded on the first pipeline stage only: the others get
// activations and targets) and the profiler. A mode adds only what is its own (the data-parallel
// step's clock and gradient timer; the pipeline's partition, channels and schedule).
void build_shared_parts(TrainSetup& s, const RunContext& ctx, RunMonitor* monitor);

}  // namespace dtune::train
