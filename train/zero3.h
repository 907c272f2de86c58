// ZeRO stage 3 (P_os+g+p), FSDP-style, --shard zero3: the parameters themselves are sharded by
// unit. A unit is the consecutive pieces of the model's chain with one unit name (models/pieces.h:
// the embedding, each transformer block, the final norm and head; the ResNet's stem, each stage,
// the pool and fc: dtune-comm --pattern fsdp's "block" units, models/model_size.h), owning the
// parameters its pieces are the first to use (the GPT's tied head weight is the embedding's).
// Each unit's parameters are views of one flat buffer whose storage is allocated only while the
// unit is gathered: before a piece's forward the units it uses are all-gathered from every rank's
// fp32 master shard (cast to the weights' dtype). With --reshard-after-forward on a unit is freed
// after the forward of the last piece that uses it (the embedding stays gathered until the head
// has used it, as FSDP2's root unit does) and gathered again before the backward of each piece
// that uses it (a hook on the piece's output). In backward a unit is freed once the backward of
// the first piece that uses it has run (FSDP's post-backward reshard: a hook on the output of the
// piece before, whose gradient is that backward's last product), so a rank holds the units of the
// piece at hand plus those an earlier piece still needs; after backward every unit is freed.
// Gradients are reduce-scattered per unit as they are ready (GradSync with one bucket per unit,
// in reverse unit order), so a rank's shard is part r of every unit (zero.h, bucket_shards), and
// the optimizer steps it. Writing the gathered values goes under autograd's version counters (the
// buffer's memory is filled, not the tensors assigned), so backward reads the same values forward
// did. Not yet: --shard-prefetch (units are gathered when needed), --shard-unit sizes in MiB.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "models/model.h"
#include "models/pieces.h"
#include "train/grad_sync.h"
#include "train/reducer.h"
#include "train/zero.h"

namespace dtune::train {

class Zero3Units {
 public:
  // `params`: the model's parameters in its order (model.parameters()).
  Zero3Units(models::Model& model, const std::vector<torch::Tensor>& params, int world, int rank,
             Reducer& reducer, bool reshard_after_forward);
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

 private:
  struct Unit {
    std::vector<size_t> params;  // indices into params_
    int64_t bucket = -1;         // its gradient bucket (-1: no parameters)
    torch::Tensor flat;          // (N x part,) in the weights' dtype; storage only while gathered
    int64_t part = 0, master_offset = 0;  // its part per rank; where that part sits in the master
    bool gathered = false;
  };
  void gather(size_t u);
  void release(size_t u);
  void gather_for(size_t piece);  // every unit the piece uses

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
  bool reshard_;
  int64_t gathered_bytes_ = 0;
  int64_t resident_ = 0, peak_ = 0;
};

}  // namespace dtune::train
