// Tensor-parallel autograd functions (tensor_parallel.h).
#include "models/tensor_parallel.h"

#include <torch/autograd.h>
#include <torch/nn/functional/embedding.h>
#include <torch/nn/functional/linear.h>

#include <algorithm>

#include "models/weight_grad_store.h"

namespace dtune::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t as_int(TpGroup* g) { return reinterpret_cast<int64_t>(g); }
// The group, at the site its forward saw (TpGroup::set_site).
void save_group(AutogradContext* ctx, int64_t group) {
  ctx->saved_data["group"] = group;
  ctx->saved_data["site"] = static_cast<int64_t>(reinterpret_cast<TpGroup*>(group)->site());
}
TpGroup* as_group(const AutogradContext* ctx) {
  auto* g = reinterpret_cast<TpGroup*>(ctx->saved_data.at("group").toInt());
  g->set_site(static_cast<int>(ctx->saved_data.at("site").toInt()));
  return g;
}

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    save_group(ctx, group);
    return x;  // the identity; autograd makes the output its own view
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    torch::Tensor g = grads[0].contiguous().clone();
    as_group(ctx)->all_reduce_sum(g);
    return {g, torch::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext* /*ctx*/, const torch::Tensor& x, int64_t group) {
    torch::Tensor y = x.contiguous().clone();
    reinterpret_cast<TpGroup*>(group)->all_reduce_sum(y);
    return y;
  }
  static variable_list backward(AutogradContext* /*ctx*/, variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

struct GatherFromSequence : torch::autograd::Function<GatherFromSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    save_group(ctx, group);
    return reinterpret_cast<TpGroup*>(group)->all_gather(x, 1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {as_group(ctx)->reduce_scatter(grads[0], 1), torch::Tensor()};
  }
};

struct ReduceScatterToSequence : torch::autograd::Function<ReduceScatterToSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    save_group(ctx, group);
    return reinterpret_cast<TpGroup*>(group)->reduce_scatter(x, 1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {as_group(ctx)->all_gather(grads[0], 1), torch::Tensor()};
  }
};

}  // namespace

void TpGroup::Traffic::add(int site, int64_t b, double s) {
  bytes += b;
  seconds += s;
  const size_t i = static_cast<size_t>(std::max(site, 0));
  if (site_bytes.size() <= i) {
    site_bytes.resize(i + 1, 0);
    site_seconds.resize(i + 1, 0.0);
  }
  site_bytes[i] += b;
  site_seconds[i] += s;
}

void TpGroup::Traffic::add(const Traffic& t) {
  for (size_t i = 0; i < t.site_bytes.size(); ++i)
    add(static_cast<int>(i), t.site_bytes[i], t.site_seconds[i]);
}

torch::Tensor gather_from_sequence(const torch::Tensor& x, TpGroup* g) {
  return GatherFromSequence::apply(x, as_int(g));
}

torch::Tensor reduce_scatter_to_sequence(const torch::Tensor& x, TpGroup* g) {
  return ReduceScatterToSequence::apply(x, as_int(g));
}

void sum_gradient_over_tp(torch::Tensor& param, TpGroup* g, int site) {
  param.register_hook([g, site](const torch::Tensor& grad) {
    torch::Tensor sum = grad.contiguous().clone();
    g->set_site(site);
    g->all_reduce_sum(sum);
    return sum;
  });
}

torch::Tensor copy_to_tp(const torch::Tensor& x, TpGroup* g) {
  return CopyToTp::apply(x, as_int(g));
}

torch::Tensor reduce_from_tp(const torch::Tensor& x, TpGroup* g) {
  return ReduceFromTp::apply(x, as_int(g));
}

torch::Tensor column_input(const torch::Tensor& x, TpGroup* g, bool sequence_parallel) {
  if (!g) return x;
  return sequence_parallel ? gather_from_sequence(x, g) : copy_to_tp(x, g);
}

torch::Tensor row_parallel(torch::nn::Linear l, const torch::Tensor& x, TpGroup* g,
                           bool sequence_parallel) {
  if (!g) return deferrable_linear(l, x);
  torch::Tensor partial = deferrable_linear(x, l->weight);
  torch::Tensor y =
      sequence_parallel ? reduce_scatter_to_sequence(partial, g) : reduce_from_tp(partial, g);
  return l->bias.defined() ? y + l->bias : y;
}

TensorMap tp_slices_of(const torch::nn::Module& m, const TensorMap& whole, int64_t rank,
                       int64_t size, const SliceRule& special) {
  TensorMap out = whole;
  for (const auto& p : m.named_parameters()) {
    auto it = out.find(p.key());
    if (it == out.end()) continue;  // load_state names what is missing
    const torch::Tensor w = it->second;
    const torch::Tensor& mine = p.value();
    if (w.dim() != mine.dim() || w.sizes() == mine.sizes()) continue;
    if (special) {
      torch::Tensor own = special(p.key(), w, mine);
      if (own.defined()) {
        it->second = own;
        continue;
      }
    }
    for (int64_t d = 0; d < w.dim(); ++d)
      if (w.size(d) != mine.size(d) && w.size(d) == mine.size(d) * size) {
        it->second = w.narrow(d, rank * mine.size(d), mine.size(d));
        break;
      }
  }
  return out;
}

torch::Tensor vocab_parallel_embedding(const torch::Tensor& tokens, const torch::Tensor& weight,
                                       int64_t first, TpGroup* g, bool sequence_parallel) {
  const int64_t rows = weight.size(0);
  const torch::Tensor outside = (tokens < first).logical_or(tokens >= first + rows);
  const torch::Tensor local = (tokens - first).masked_fill(outside, 0);
  torch::Tensor out = torch::nn::functional::embedding(local, weight);  // (..., C)
  out = out.masked_fill(outside.unsqueeze(-1), 0);
  return sequence_parallel ? reduce_scatter_to_sequence(out, g) : reduce_from_tp(out, g);
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& target,
                                           int64_t first, TpGroup* g) {
  const int64_t vl = logits.size(-1);
  const torch::Tensor x = logits.reshape({-1, vl}).to(torch::kFloat);  // (N, V/T)
  const torch::Tensor t = target.reshape({-1});                        // (N)
  torch::Tensor m = std::get<0>(x.detach().max(-1)).contiguous();      // (N) this slice's
  g->all_reduce_max(m);                                                // the row's maximum
  const torch::Tensor shifted = x - m.unsqueeze(-1);
  const torch::Tensor sum_exp = reduce_from_tp(shifted.exp().sum(-1), g);  // (N)
  const torch::Tensor valid = t.ne(-1);
  const torch::Tensor mine = valid.logical_and(t >= first).logical_and(t < first + vl);
  const torch::Tensor index = (t - first).clamp(0, vl - 1).unsqueeze(1);
  const torch::Tensor picked = reduce_from_tp(
      shifted.gather(1, index).squeeze(1) * mine.to(torch::kFloat), g);  // the target's logit
  const torch::Tensor per_token = (sum_exp.log() - picked) * valid.to(torch::kFloat);
  return per_token.sum() / valid.sum().clamp_min(1).to(torch::kFloat);
}

}  // namespace dtune::models
