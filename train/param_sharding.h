// How the data axis of the mesh (train/mesh.h) holds this rank's parameters, their gradients and
// the optimizer state: replicated (DDP: every rank holds all of them, the optimizer steps the
// parameters or their fp32 master copy), or sharded by ZeRO's stages (--shard zero1, zero2: the
// optimizer state and gradients, train/zero.h; zero3: the parameters too, train/zero3.h). A step
// calls the same hooks whichever it is (data_parallel_step.cc, pipeline/pipeline_step.cc); DDP is
// the case where most of them do nothing.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "models/model.h"
#include "models/pieces.h"
#include "train/outcome.h"
#include "train/phase_clock.h"

namespace dtune::train {

struct TrainSetup;

class ParamSharding {
 public:
  virtual ~ParamSharding() = default;

  // Before a step: the gradients the optimizer stepped last time are let go (the parameters'
  // .grad the step drops itself); zero3 starts counting its gathered bytes.
  virtual void begin_step() = 0;
  // The model's forward: zero3 runs it piece by piece with each unit gathered around its pieces.
  virtual torch::Tensor forward(models::Model& model, const torch::Tensor& input) {
    return model.forward(input);
  }
  // A pipeline stage's chunk: pieces [begin, end) on `x`. zero3 (whose units are cut from the
  // stage's pieces: one chunk) runs them with each unit gathered around its pieces.
  virtual torch::Tensor forward_chunk(const std::vector<models::Piece>& pieces, size_t begin,
                                      size_t end, torch::Tensor x) {
    for (size_t i = begin; i < end; ++i) x = pieces[i].forward(x);
    return x;
  }
  // Whether the gradient sync reduce-scatters (zero2, zero3), which it then does every
  // micro-step, adding up the parts (grad_sync.h prepare).
  virtual bool reduce_scatters() const { return false; }
  // After each micro-step's backward (zero3: every unit freed).
  virtual void after_backward() {}
  // After the gradient sync: what the loss scaler unscales and the optimizer steps (the
  // parameters' averaged gradients, or this rank's fp32 shard of them).
  virtual std::vector<torch::Tensor> grads() = 0;
  // The optimizer step (its fp32 master copy cast back into the parameters).
  virtual void step() = 0;
  // After a step that was not skipped: collective over the data axis when it returns true (zero1
  // and zero2 all-gather the updated shards into every rank's parameters; exposed communication).
  virtual bool gather() { return false; }
  // After each step's timing ends.
  virtual void end_step() {}
  // zero3: the waits for its gathers are marked on `clock` as communication (the clock is built
  // after the sharding); nothing for the others.
  virtual void set_clock(PhaseClock* /*clock*/) {}
  // After the last step: the optimizer's state, the parameter bytes resident and at their peak,
  // and the bytes gathered per step into `out`; zero3 then gathers the whole model (the final
  // check and --debug-dump read it).
  virtual void finish(TrainOutcome& out) = 0;
};

// The sharding of s.params over the data axis (`dp` ranks, this one `dp_rank`, reducing over
// s.reducer) by s.o.shard; builds s.sync first when `with_sync` (zero3 always: its units are the
// buckets) and, replicated, s.master (bf16 weights) and s.optimizer. zero3 shards s.model, whose
// parameters s.params must be, or, with s.stage_pieces (a pipeline stage's), those pieces'.
std::unique_ptr<ParamSharding> build_param_sharding(TrainSetup& s, int dp, int dp_rank,
                                                    bool with_sync);
// The gradient figures every sharding shares: the parameters' .grad left after the last step plus
// what the sync's buckets hold, and the most held at once.
void account_gradients(TrainSetup& s, TrainOutcome& out);

}  // namespace dtune::train
