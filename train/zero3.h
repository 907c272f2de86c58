// ZeRO stage 3 (P_os+g+p), FSDP-style, --shard zero3: the parameters themselves are sharded by
// unit. A unit (--shard-unit) is either `block`: the consecutive pieces of the model's chain with
// one unit name (models/pieces.h: the embedding, each transformer block, the final norm and head;
// the ResNet's stem, each stage, the pool and fc: dtune-comm --pattern fsdp's "block" units,
// models/model_size.h), owning the parameters its pieces are the first to use (the GPT's tied head
// weight is the embedding's); or a size in MiB: the parameters cut as gradient buckets are
// (grad_sync.h plan_buckets, every unit capped at that size, a larger parameter a unit of its own;
// `dtune model`'s --shard-unit-mb units), a piece then using every unit that owns one of its
// parameters. Each unit's parameters are views of one flat buffer whose storage is allocated only
// while the unit is gathered (or being gathered): a gather is issued on the reducer's queue
// (start_allgather, beside the computation) and waited for before the first piece that uses the
// unit. With --shard-prefetch N, when a piece's forward starts the gathers of the N units after
// its own are issued too, and when its backward starts those of the N units before (0: a unit's
// gather is issued when it is needed; the wait is then the whole gather). With
// --reshard-after-forward on a unit is freed after the forward of the last piece that uses it
// (the embedding stays gathered until the head has used it, as FSDP2's root unit does) and
// gathered again before the backward of each piece that uses it (a hook on the piece's output).
// In backward a unit is freed once the backward of the first piece that uses it has run (FSDP's
// post-backward reshard: a hook on the output of the piece before, whose gradient is that
// backward's last product), so a rank holds the units of the piece at hand, those an earlier
// piece still needs and the prefetched ones; after backward every unit is freed. The time spent
// waiting for a gather is exposed communication (set_clock). Gradients are reduce-scattered per
// unit as they are ready (GradSync with one bucket per unit, in reverse unit order), so a rank's
// shard is part r of every unit (zero.h, bucket_shards), and the optimizer steps it. Writing the
// gathered values goes under autograd's version counters (the buffer's memory is filled, not the
// tensors assigned), so backward reads the same values forward did.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"
#include "models/pieces.h"
#include "train/grad_sync.h"
#include "train/phase_clock.h"
#include "train/reducer.h"
#include "train/zero.h"

namespace dtune::train {

class Zero3Units {
 public:
  struct Options {
    bool reshard_after_forward = true;
    double unit_mib = 0;  // > 0: units of at most this many MiB; 0: by block
    int prefetch = 1;     // units gathered ahead
    double timeout_s = 300;
  };
  // `params`: the model's parameters in its order (model.parameters()).
  Zero3Units(models::Model& model, const std::vector<torch::Tensor>& params, int world, int rank,
             Reducer& reducer, const Options& o);
  // A pipeline stage's: its pieces (forward() runs them in order) and its parameters with their
  // names (those the pieces use, in model order).
  Zero3Units(std::vector<models::Piece> pieces, const std::vector<std::string>& names,
             const std::vector<torch::Tensor>& params, int world, int rank, Reducer& reducer,
             const Options& o);
  Zero3Units(const Zero3Units&) = delete;
  Zero3Units& operator=(const Zero3Units&) = delete;
  // The gradient buckets: one per unit with parameters, in reverse unit order, each unit's
  // parameters in reverse model order (the order backward produces them).
  const BucketLayout& layout() const { return layout_; }
  // After GradSync (built with layout()) and the optimizer (bucket_shards of it, keep_master):
  // lays each unit's parameters into its flat buffer in its bucket's order, then frees them all.
  void shard(const GradSync& sync, const ZeroOptimizer& zero);
  // The model's forward, piece by piece with the gathers around each.
  torch::Tensor forward(const torch::Tensor& input);
  // After each backward: every unit freed.
  void release_all();
  // The whole model, gathered (the final check and --debug-dump read it).
  void gather_all();
  // Bytes of unit buffers allocated now, and the most allocated at once since shard().
  int64_t resident_bytes() const { return resident_; }
  int64_t peak_bytes() const { return peak_; }
  // Bytes this rank received in gathers since the last call.
  int64_t take_gathered_bytes() { return std::exchange(gathered_bytes_, 0); }
  // The units and their parameter bytes (without padding), in forward order.
  size_t units() const { return units_.size(); }
  size_t pieces() const { return pieces_.size(); }
  int64_t unit_bytes(size_t u) const;
  // Waits for gathers are marked on `clock` as communication (kComm), the time before them as
  // the phase at hand (forward or backward); null: not marked.
  void set_clock(PhaseClock* clock) { clock_ = clock; }

 private:
  struct Unit {
    std::vector<size_t> params;  // indices into params_
    int64_t bucket = -1;         // its gradient bucket (-1: no parameters)
    torch::Tensor flat;          // (N x part,) in the weights' dtype; storage only while gathered
    int64_t part = 0, master_offset = 0;  // its part per rank; where that part sits in the master
    bool gathered = false;                // storage allocated: in flight or done
    int64_t ticket = 0;                   // > 0: the gather in flight (Reducer::start_allgather)
  };
  void issue(size_t u);  // starts the unit's gather (nothing if gathered)
  // Waits for the unit's gather; with `phase` (and a clock) the wait is marked as communication.
  void ready(size_t u, const Phase* phase);
  void release(size_t u);               // frees its storage (after its gather is done)
  void use(size_t piece, Phase phase);  // the piece's units gathered, the next prefetched

  Options o_;
  PhaseClock* clock_ = nullptr;
  std::vector<torch::Tensor> params_;
  std::vector<models::Piece> pieces_;
  std::vector<std::set<size_t>> uses_;                 // per piece: the units it uses
  std::vector<std::vector<size_t>> last_in_forward_;   // per piece: the units no later one uses
  std::vector<std::vector<size_t>> last_in_backward_;  // per piece: the units no earlier one uses
  std::vector<Unit> units_;  // in forward order: consecutive pieces of one unit name
  BucketLayout layout_;
  Reducer& reducer_;
  const ZeroOptimizer* zero_ = nullptr;
  int world_;
  int rank_;
  int64_t gathered_bytes_ = 0;
  int64_t resident_ = 0, peak_ = 0;
};

}  // namespace dtune::train
