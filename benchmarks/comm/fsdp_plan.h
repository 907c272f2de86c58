// The collective calls of one ZeRO-3 / FSDP training step (dtune-comm --pattern fsdp), as values:
// the model cut into units (one per transformer block or ResNet stage, or units of a fixed size),
// and per unit the calls FSDP makes: in forward, in unit order, an all-gather of the unit's
// parameters; in backward, in reverse unit order, the all-gather again when the unit was resharded
// after forward, then a reduce-scatter of its gradient. No I/O: the replay (fsdp_replay.h) times
// these calls and the reporters print and store them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/comm/types.h"
#include "models/model_size.h"
#include "models/shard_unit.h"

namespace dtune::comm {

// --reshard-after-forward: free the gathered parameters after a unit's forward (ZeRO-3; backward
// gathers them again) or keep them until its backward (ZeRO-2-like memory, one gather per step).
enum class Reshard { kOff, kOn };
// --placement: how each call places its buffers. fsdp2 is what PyTorch's fully_shard does
// (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): all_gather_into_tensor with the
// input a view of this rank's slice of the output (in place: all_gather_copy_in narrows the
// output), reduce_scatter_tensor into a new output (out of place: foreach_reduce allocates it).
enum class FsdpPlacement { kFsdp2, kOutOfPlace, kInPlace };
enum class Phase { kForward, kBackward };

const std::vector<EnumName<Reshard>>& reshard_names();               // off, on
const std::vector<EnumName<FsdpPlacement>>& fsdp_placement_names();  // fsdp2, out-of-place, ...
const std::vector<EnumName<Phase>>& phase_names();                   // forward, backward
std::string to_string(Reshard r);
std::string to_string(FsdpPlacement p);
std::string to_string(Phase p);

// --shard-unit: `block` (model_size.h's units: a transformer block or ResNet stage each, the
// embeddings, final norm and head, or the stem and head, on their own), or a size in MiB: whole
// parameters grouped as gradient buckets are (models/bucket_plan.h, every unit capped at that
// many MiB in the weights' dtype, a larger parameter a unit of its own), as dtune-train
// --shard-unit and dtune model --shard-unit-mb cut them.
// models/shard_unit.h reads it (bounded: refused past 1 PiB).
using models::parse_shard_unit;
using models::ShardUnit;

// One unit as FSDP shards it: its parameters flattened, padded with zeros to a multiple of the
// ranks so that every rank holds an equal shard (FSDP1's FlatParameter padding; FSDP2 pads each
// parameter's dim 0 instead, a little more).
struct FsdpUnit {
  std::string name;        // "embed", "h.0", ..., "ln_f"; "stem", "layer1", ...; "part.0", ...
  int64_t parameters = 0;  // elements before padding
  int64_t padded = 0;      // elements after padding: a multiple of the ranks
  size_t bytes = 0;        // padded × the weights' dtype size: the all-gather's output and the
                           // reduce-scatter's input
};

// One collective call of the step.
struct FsdpCall {
  Phase phase = Phase::kForward;
  size_t unit = 0;  // index into the plan's units
  Placement placement = Placement::kOutOfPlace;
  // all-gather: count = padded / N elements in per rank, bytes = the unit's bytes out; reduce-
  // scatter: bytes in, count = padded / N out (make_shape, nccl-tests' size convention).
  OpShape shape{};
};

// Everything a step replays: the units in model order and the calls in the order FSDP makes them.
struct FsdpPlan {
  std::string model;
  int64_t model_parameters = 0;
  ShardUnit shard_unit;
  Dtype dtype = Dtype::kFloat32;
  Reshard reshard = Reshard::kOn;
  FsdpPlacement placement = FsdpPlacement::kFsdp2;
  int nranks = 1;
  std::vector<FsdpUnit> units;
  std::vector<FsdpCall> calls;
};

// At most this many units: a step of a million calls is a typo in --shard-unit.
inline constexpr size_t kMaxFsdpUnits = 10000;

// The units of a model of `size` (model_size.h: its blocks, in model order, and its parameters'
// sizes), padded for `nranks`. Throws UsageError when a size unit is smaller than one element or
// gives more than kMaxFsdpUnits units.
std::vector<FsdpUnit> shard_units(const models::ModelSize& size, const ShardUnit& unit, Dtype dtype,
                                  int nranks);
// The calls of one step over `units`: with reshard on, all-gather 0..U-1, then for u = U-1..0
// all-gather u and reduce-scatter u (3U calls); with reshard off the backward all-gathers are not
// made (2U calls). Reductions sum (FSDP2's default divides by the ranks around the sum).
std::vector<FsdpCall> fsdp_step_calls(const std::vector<FsdpUnit>& units, Dtype dtype, int nranks,
                                      Reshard reshard, FsdpPlacement placement);
// The whole plan for `model` at its default options (model_size.h); throws UsageError for an
// unknown model, as shard_units does for a bad unit.
FsdpPlan make_fsdp_plan(const std::string& model, const ShardUnit& unit, Dtype dtype, int nranks,
                        Reshard reshard, FsdpPlacement placement);

}  // namespace dtune::comm
