// ZeRO-3's units.
#include "train/zero3.h"

#include <c10/core/StorageImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <string>

#include "core/error.h"
#include "models/shard_unit.h"

namespace dtune::train {
namespace {

// The buffer's memory goes (its views keep their sizes and offsets; nothing may read them).
void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(0));
  s->set_nbytes(0);
}

// Memory for the whole buffer again, under the same storage (so its views see it).
void alloc_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

}  // namespace

namespace {

std::vector<std::string> names_of(models::Model& model) {
  std::vector<std::string> names;
  for (const auto& p : model.named_parameters()) names.push_back(p.key());
  return names;
}

}  // namespace

Zero3Units::Zero3Units(models::Model& model, const std::vector<torch::Tensor>& params, int world,
                       int rank, Reducer& reducer, const Options& o)
    : Zero3Units(models::model_pieces(model), names_of(model), params, world, rank, reducer, o) {}

Zero3Units::Zero3Units(std::vector<models::Piece> pieces, const std::vector<std::string>& names,
                       const std::vector<torch::Tensor>& params, int world, int rank,
                       Reducer& reducer, const Options& o)
    : o_(o),
      params_(params),
      pieces_(std::move(pieces)),
      reducer_(reducer),
      world_(world),
      rank_(rank) {
  std::map<std::string, size_t> index;
  size_t i = 0;
  for (const auto& name : names) index[name] = i++;
  DTUNE_CHECK(i == params_.size(), "--shard zero3: the model's parameters changed");
  std::vector<int64_t> owner(params_.size(), -1);
  if (o_.unit_mib > 0) {
    // Units of a size: the parameters cut as buckets are (reverse model order), then put in
    // forward order.
    std::vector<int64_t> bytes;
    for (const auto& p : params_)
      bytes.push_back(p.numel() * static_cast<int64_t>(p.element_size()));
    const int64_t cap = models::shard_unit_cap_bytes(o_.unit_mib);
    const BucketLayout cut = plan_buckets(bytes, cap, cap);
    for (size_t b = cut.params.size(); b-- > 0;) {
      units_.emplace_back();
      for (size_t k : cut.params[b]) {
        owner[k] = static_cast<int64_t>(units_.size() - 1);
        units_.back().params.push_back(k);
      }
    }
  } else {
    // Consecutive pieces of one unit name (a ResNet stage's blocks) make one unit, which owns
    // the parameters its pieces are the first to use.
    std::vector<size_t> unit_of(pieces_.size());
    for (size_t piece = 0; piece < pieces_.size(); ++piece) {
      const bool same = piece > 0 && pieces_[piece].unit_name() == pieces_[piece - 1].unit_name();
      if (!same) units_.emplace_back();
      unit_of[piece] = units_.size() - 1;
    }
    for (size_t piece = 0; piece < pieces_.size(); ++piece)
      for (const auto& name : pieces_[piece].parameters) {
        const size_t k = index.at(name);
        if (owner[k] < 0) {
          owner[k] = static_cast<int64_t>(unit_of[piece]);
          units_[unit_of[piece]].params.push_back(k);
        }
      }
  }
  uses_.resize(pieces_.size());
  for (size_t piece = 0; piece < pieces_.size(); ++piece)
    for (const auto& name : pieces_[piece].parameters) {
      const size_t k = index.at(name);
      DTUNE_CHECK(owner[k] >= 0, "--shard zero3: a parameter in no unit");
      uses_[piece].insert(static_cast<size_t>(owner[k]));
    }
  std::vector<bool> used(params_.size(), false);
  for (const auto& piece : pieces_)
    for (const auto& name : piece.parameters) used[index.at(name)] = true;
  for (size_t k = 0; k < used.size(); ++k)
    DTUNE_CHECK(used[k], "--shard zero3: a parameter no piece of the model uses");
  // Forward runs the pieces first to last and backward last to first: a unit is done with after
  // its last user's forward, and after its first user's backward.
  last_in_forward_.resize(pieces_.size());
  last_in_backward_.resize(pieces_.size());
  std::vector<size_t> first_user(units_.size(), pieces_.size()), last_user(units_.size(), 0);
  for (size_t piece = 0; piece < pieces_.size(); ++piece)
    for (size_t u : uses_[piece]) {
      first_user[u] = std::min(first_user[u], piece);
      last_user[u] = piece;
    }
  for (size_t u = 0; u < units_.size(); ++u)
    if (first_user[u] < pieces_.size()) {
      last_in_backward_[first_user[u]].push_back(u);
      last_in_forward_[last_user[u]].push_back(u);
    }
  for (size_t u = units_.size(); u-- > 0;) {
    Unit& unit = units_[u];
    if (unit.params.empty()) continue;
    std::sort(unit.params.rbegin(), unit.params.rend());  // as backward produces them
    unit.bucket = static_cast<int64_t>(layout_.params.size());
    layout_.params.push_back(unit.params);
    int64_t bytes = 0;
    for (size_t k : unit.params) bytes += params_[k].numel() * params_[k].element_size();
    layout_.bytes.push_back(bytes);
  }
}

int64_t Zero3Units::unit_bytes(size_t u) const {
  const Unit& unit = units_[u];
  return unit.bucket < 0 ? 0 : layout_.bytes[static_cast<size_t>(unit.bucket)];
}

void Zero3Units::shard(const GradSync& sync, const ZeroOptimizer& zero) {
  zero_ = &zero;
  std::vector<int64_t> master_offset(sync.buckets());
  for (size_t b = 1; b < sync.buckets(); ++b)
    master_offset[b] = master_offset[b - 1] + sync.bucket(b - 1).shard.numel();
  torch::NoGradGuard no_grad;
  for (Unit& unit : units_) {
    if (unit.bucket < 0) continue;
    const GradSync::Bucket& bucket = sync.bucket(static_cast<size_t>(unit.bucket));
    unit.part = bucket.shard.numel();
    unit.master_offset = master_offset[static_cast<size_t>(unit.bucket)];
    unit.flat = torch::zeros({unit.part * world_}, params_.front().options());
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
      torch::Tensor& p = params_[bucket.params[slot]];
      DTUNE_CHECK(p.is_contiguous(), "--shard zero3: contiguous parameters (not channels-last)");
      torch::Tensor view = unit.flat.narrow(0, bucket.offsets[slot], p.numel()).view(p.sizes());
      view.copy_(p.detach());
      p.set_data(view);
    }
    unit.gathered = true;
    resident_ += static_cast<int64_t>(unit.flat.nbytes());
  }
  release_all();
  peak_ = 0;
}

void Zero3Units::issue(size_t u) {
  Unit& unit = units_[u];
  if (unit.bucket < 0 || unit.gathered) return;
  torch::NoGradGuard no_grad;
  alloc_storage(unit.flat);
  // The padding of the last part is the master's padding: zeros.
  unit.flat.narrow(0, rank_ * unit.part, unit.part)
      .copy_(zero_->master().narrow(0, unit.master_offset, unit.part));
  unit.ticket = reducer_.start_allgather(unit.flat);
  unit.gathered = true;
  resident_ += static_cast<int64_t>(unit.flat.nbytes());
  peak_ = std::max(peak_, resident_);
  gathered_bytes_ += (world_ - 1) * unit.part * static_cast<int64_t>(unit.flat.element_size());
}

void Zero3Units::ready(size_t u, const Phase* phase) {
  Unit& unit = units_[u];
  if (unit.ticket == 0) return;
  if (clock_ && phase) clock_->mark(*phase);
  reducer_.wait_gathered(unit.ticket, Deadline::after_s(o_.timeout_s));
  if (clock_ && phase) clock_->mark(Phase::kComm);
  unit.ticket = 0;
}

void Zero3Units::release(size_t u) {
  Unit& unit = units_[u];
  if (unit.bucket < 0 || !unit.gathered) return;
  ready(u, nullptr);  // the reducer may still be writing into it
  free_storage(unit.flat);
  unit.gathered = false;
  resident_ -= static_cast<int64_t>(unit.flat.nbytes());
}

void Zero3Units::use(size_t piece, Phase phase) {
  const std::set<size_t>& mine = uses_[piece];
  for (size_t u : mine) issue(u);
  // Prefetch: in forward the units after this piece's, in backward those before.
  const auto n = static_cast<size_t>(std::max(o_.prefetch, 0));
  if (phase == Phase::kForward) {
    for (size_t u = *mine.rbegin() + 1; u < units_.size() && u <= *mine.rbegin() + n; ++u) issue(u);
  } else {
    const size_t lo = *mine.begin();
    for (size_t u = lo; u-- > 0 && u + n >= lo;) issue(u);
  }
  for (size_t u : mine) ready(u, &phase);
}

torch::Tensor Zero3Units::forward(const torch::Tensor& input) {
  torch::Tensor x = input;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (!uses_[i].empty()) use(i, Phase::kForward);
    x = pieces_[i].forward(x);
    if (o_.reshard_after_forward)
      for (size_t u : last_in_forward_[i]) release(u);
    // This gradient is complete when the next piece's backward has run (it is that backward's
    // last product): the units no earlier piece uses go; then, before this piece's backward, its
    // units again (with reshard; without, they are still there).
    if (x.requires_grad())
      x.register_hook([this, i](const torch::Tensor& grad) {
        if (i + 1 < pieces_.size())
          for (size_t u : last_in_backward_[i + 1]) release(u);
        if (!uses_[i].empty()) use(i, Phase::kBackward);
        return grad;
      });
  }
  return x;
}

void Zero3Units::release_all() {
  for (size_t u = 0; u < units_.size(); ++u) release(u);
}

void Zero3Units::gather_all() {
  for (size_t u = 0; u < units_.size(); ++u) issue(u);
  for (size_t u = 0; u < units_.size(); ++u) ready(u, nullptr);
}

}  // namespace dtune::train
