// What a training run produced: one record per optimizer step (its phase times, loss and loss
// scale) and the run's outcome (the batch it ran, memory, the model's size and FLOPs, the device,
// the divergence verdict, profile and data summaries), which the results writers read
// (benchmarks/train/train_summary.h). OutOfMemory is how a batch that does not fit ends a run.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/device_info.h"
#include "train/config.h"
#include "train/mode_results.h"
#include "train/phase_clock.h"
#include "train/telemetry/profile_results.h"

namespace dtune::train {

struct StepRecord {
  PhaseTimes phases{};
  double total_ms = 0;
  double loss = 0;        // mean over micro-steps, unscaled
  double loss_scale = 1;  // fp16: the scale used in this step
  bool skipped = false;   // fp16: inf/NaN gradients, step skipped on every rank
  bool profiled = false;  // inside the --profile-steps window (left out of throughput)
};

struct TrainOutcome {
  std::vector<StepRecord> steps;  // warm-up first
  int64_t batch = 0;              // per rank per micro-step (after --batch auto)
  int64_t peak_memory_bytes = 0;
  int64_t peak_reserved_bytes = 0;  // the allocator's reserved peak (TensorMemory)
  int64_t peak_rss_bytes = 0;       // CPU: the process's peak resident set, for reference
  std::string memory_source;
  std::string device_name;
  int device_index = -1;  // the GPU this rank trained on (made current); -1: CPU
  int64_t parameters = 0;
  double training_flops_per_sample = 0;
  double tokens_per_sample = 1;
  std::string flops_formula;
  double alt_training_flops_per_sample = 0;  // by alt_flops_formula (NaN: none)
  std::string alt_flops_formula;
  DeviceProperties gpu;  // what picks the MFU peak (empty on CPU)
  std::vector<int64_t> bucket_bytes;
  // Resident between steps on this rank: the optimizer's state and the fp32 master copy (bf16
  // weights) or, with --shard zero1, this rank's shard of both.
  int64_t optimizer_state_bytes = 0;
  int64_t gathered_bytes_per_step = 0;          // --shard: the parameter all-gather, received
  int64_t reduce_scattered_bytes_per_step = 0;  // --shard zero2: this rank's parts, received
  // Resident after the last step: the parameters (zero1: their flat buffer, padding included),
  // and the gradients with the buckets that carry them (parameters' .grad, bucket flats, shards).
  int64_t param_bytes_resident = 0;
  int64_t grad_bytes_resident = 0;
  // The most parameter bytes held at once during the steps: zero3's gathered units at their peak
  // (in forward or backward); every other mode holds its parameters throughout (= resident).
  int64_t param_bytes_peak = 0;
  // The most gradient bytes held at once during the steps (GradSync::take_peak_bytes; one rank:
  // the parameters' .grad, which stay).
  int64_t grad_bytes_peak = 0;
  // Data parallel: the most bytes one micro-step's forward and loss left held for its backward
  // (activations, logits, loss; TensorMemory's counting), and with --activation-checkpoint the
  // backward's recomputation per measured step (host clock: exact on CPU, launches only on a GPU).
  int64_t activation_bytes = 0;
  double recompute_ms_per_step = 0;
  std::string attention_backend;  // the fused attention kernel SDPA chose; empty: none
  // Tensor parallelism: the bytes this rank's tp-group collectives reduced per measured step (each
  // all-reduce's input, as nccl-tests sizes it) and the time they took (MPI: blocking, host clock).
  int64_t tp_comm_bytes_per_step = 0;
  double tp_comm_ms_per_step = 0;
  // The same by layer (models::TpGroup::set_site): [0] the embedding, [1 + i] block i, [layers
  // + 1] the head with its loss; empty without tensor parallelism.
  std::vector<int64_t> tp_comm_bytes_by_layer;
  std::vector<double> tp_comm_ms_by_layer;
  std::vector<std::vector<double>> grad_ready_ms;  // (S, P): GradTimer's rows, warm-up first
  std::vector<int64_t> param_bytes;                // (P,) in model order
  std::vector<double> param_checksums;             // rank 0: every rank's, at the last check
  // Non-empty: the divergence guard's message. The run stopped after that check; `steps` holds
  // the steps run until then.
  std::string diverged;
  bool interrupted = false;    // the ranks agreed to stop after the last step in `steps` (a signal)
  bool final_average = false;  // local SGD: averaged once more after the last step (not an H-th)
  ProfileSummary profile;      // --profile-steps
  DataSummary data;            // what loading cost
  std::shared_ptr<ModeResults> mode;  // the mode's own results (the pipeline's); null: none
};

// An out-of-memory at `batch`: a CUDA OOM, or CPU tensors beyond --memory-limit-mb.
struct OutOfMemory : std::runtime_error {
  OutOfMemory(int64_t batch, int64_t peak_bytes, const std::string& what)
      : std::runtime_error(what), batch(batch), peak_bytes(peak_bytes) {}
  int64_t batch;
  int64_t peak_bytes;
};

}  // namespace dtune::train
