// The Llama family in LibTorch, operation for operation as transformers' modeling_llama.py (5.x)
// computes it, so that a checkpoint gives the same logits. Shapes as in llama.h.
#include "models/llama.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/init.h>

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "models/checkpoint.h"
#include "models/model_size.h"
#include "models/weight_grad_store.h"

namespace dtune::models {
namespace {

namespace F = torch::nn::functional;

// LlamaRMSNorm: in float32, x / sqrt(mean(x²) + eps), back to the input's dtype, times the weight.
class RmsNorm : public torch::nn::Module {
 public:
  RmsNorm(int64_t c, double eps) : eps_(eps) {
    weight = register_parameter("weight", torch::ones({c}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x.to(torch::kFloat);
    h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    return weight * h.to(x.scalar_type());
  }
  torch::Tensor weight;

 private:
  double eps_;
};

torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

// rotate_half: element j pairs with j + D/2 (Hugging Face's convention; Meta's original pairs
// neighbours, and HF's conversion permutes q/k weights to match this one).
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

class Attention : public torch::nn::Module {
 public:
  Attention(const LlamaConfig& c, int64_t t, TpGroup* tp, bool sp)
      : heads_(c.heads / t), kv_heads_(c.kv_heads / t), d_(c.head_dim), tp_(tp), sp_(sp) {
    q_proj = register_module("q_proj", make_linear(c.width, heads_ * d_, c.attention_bias));
    k_proj = register_module("k_proj", make_linear(c.width, kv_heads_ * d_, c.attention_bias));
    v_proj = register_module("v_proj", make_linear(c.width, kv_heads_ * d_, c.attention_bias));
    o_proj = register_module("o_proj", make_linear(heads_ * d_, c.width, c.attention_bias));
  }
  // x (B, T, C); cos, sin (T, D). Returns (B, T, C) and sets `backend` to the kernel SDPA chose.
  torch::Tensor forward(const torch::Tensor& x_in, const torch::Tensor& cos,
                        const torch::Tensor& sin, std::string* backend) {
    const torch::Tensor x = column_input(x_in, tp_, sp_);
    const int64_t B = x.size(0), T = x.size(1);
    auto heads = [&](const torch::Tensor& t, int64_t n) {
      return t.view({B, T, n, d_}).transpose(1, 2);  // (B, n, T, D)
    };
    torch::Tensor q = heads(deferrable_linear(q_proj, x), heads_),
                  k = heads(deferrable_linear(k_proj, x), kv_heads_);
    torch::Tensor v = heads(deferrable_linear(v_proj, x), kv_heads_);
    q = q * cos + rotate_half(q) * sin;  // cos, sin broadcast over (B, n)
    k = k * cos + rotate_half(k) * sin;
    // Grouped-query attention: each KV head serves heads / kv_heads query heads, consecutive ones
    // (transformers' repeat_kv; SDPA's enable_gqa is the same grouping without the copy).
    const bool gqa = kv_heads_ != heads_;
    if (backend->empty())
      *backend = sdp_backend_name(
          at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, gqa));
    torch::Tensor y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true,
                                                       std::nullopt, gqa);  // (B, H, T, D)
    return row_parallel(o_proj, y.transpose(1, 2).reshape({B, T, heads_ * d_}), tp_, sp_);
  }
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  int64_t heads_, kv_heads_, d_;  // this rank's heads
  TpGroup* tp_;
  bool sp_;
};

class Mlp : public torch::nn::Module {
 public:
  Mlp(const LlamaConfig& c, int64_t t, TpGroup* tp, bool sp) : tp_(tp), sp_(sp) {
    const int64_t i = c.intermediate / t;
    gate_proj = register_module("gate_proj", make_linear(c.width, i, c.mlp_bias));
    up_proj = register_module("up_proj", make_linear(c.width, i, c.mlp_bias));
    down_proj = register_module("down_proj", make_linear(i, c.width, c.mlp_bias));
  }
  torch::Tensor forward(const torch::Tensor& x_in) {  // SwiGLU: down(silu(gate(x)) * up(x))
    const torch::Tensor x = column_input(x_in, tp_, sp_);
    return row_parallel(down_proj,
                        F::silu(deferrable_linear(gate_proj, x)) * deferrable_linear(up_proj, x),
                        tp_, sp_);
  }
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  TpGroup* tp_;
  bool sp_;
};

class DecoderLayer : public torch::nn::Module {
 public:
  // `site`: the layer's in the per-layer tensor-parallel figures (TpGroup::set_site), set by each
  // half, so that a half recomputed in the backward (activation checkpointing) counts here too.
  DecoderLayer(const LlamaConfig& c, int64_t t, TpGroup* tp, bool sp, int site)
      : tp_(tp), site_(site) {
    self_attn = register_module("self_attn", std::make_shared<Attention>(c, t, tp, sp));
    mlp = register_module("mlp", std::make_shared<Mlp>(c, t, tp, sp));
    input_layernorm =
        register_module("input_layernorm", std::make_shared<RmsNorm>(c.width, c.rms_eps));
    post_attention_layernorm =
        register_module("post_attention_layernorm", std::make_shared<RmsNorm>(c.width, c.rms_eps));
  }
  torch::Tensor attention_half(const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, std::string* backend) {
    if (tp_) tp_->set_site(site_);
    return self_attn->forward(input_layernorm->forward(x), cos, sin, backend);
  }
  torch::Tensor mlp_half(const torch::Tensor& x) {
    if (tp_) tp_->set_site(site_);
    return mlp->forward(post_attention_layernorm->forward(x));
  }
  std::shared_ptr<Attention> self_attn;
  std::shared_ptr<Mlp> mlp;
  std::shared_ptr<RmsNorm> input_layernorm, post_attention_layernorm;

 private:
  TpGroup* tp_;
  int site_;
};

}  // namespace

Llama::Llama(const LlamaConfig& cfg, ActivationCheckpoint checkpoint, std::shared_ptr<TpGroup> tp,
             bool sequence_parallel)
    : cfg_(cfg), checkpoint_(checkpoint) {
  if (tp && tp->size() > 1) {
    tp_ = std::move(tp);
    tp_size_ = tp_->size();
    tp_rank_ = tp_->rank();
    for (const auto& [n, v] : {std::pair<const char*, int64_t>{"num_key_value_heads", cfg.kv_heads},
                               {"num_attention_heads", cfg.heads},
                               {"intermediate_size", cfg.intermediate},
                               {"vocab_size (--vocab)", cfg.vocab}})
      if (v % tp_size_ != 0)
        throw UsageError("--tp " + std::to_string(tp_size_) + " does not divide " + cfg.name +
                         "'s " + n + " " + std::to_string(v) +
                         " (tensor parallelism splits it evenly; Megatron pads the vocabulary: "
                         "give --vocab a multiple)");
    sp_ = sequence_parallel;
    if (sp_ && cfg.context % tp_size_ != 0)
      throw UsageError("--sequence-parallel: --tp " + std::to_string(tp_size_) +
                       " does not divide the context " + std::to_string(cfg.context) +
                       " (each rank holds context / tp positions; give --context a multiple)");
  }
  TpGroup* g = tp_.get();
  const int64_t t = tp_size_;
  model_ = register_module("model", std::make_shared<torch::nn::Module>());
  embed_tokens_ =
      model_->register_module("embed_tokens", torch::nn::Embedding(cfg.vocab / t, cfg.width));
  layers_ = model_->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.layers; ++i)
    layers_->push_back(std::make_shared<DecoderLayer>(cfg, t, g, sp_, static_cast<int>(i) + 1));
  norm_ = model_->register_module("norm", std::make_shared<RmsNorm>(cfg.width, cfg.rms_eps));
  if (!cfg.tied_embedding)
    lm_head_ = register_module("lm_head", make_linear(cfg.width, cfg.vocab / t, false));
  if (sp_) {  // the norms see this rank's positions only: their gradients summed over the group
    for (size_t i = 0; i < layers_->size(); ++i)
      for (auto& p : layers_->ptr(i)->named_parameters())
        if (p.key().ends_with("norm.weight"))
          sum_gradient_over_tp(p.value(), g, static_cast<int>(i) + 1);
    sum_gradient_over_tp(norm_->as<RmsNorm>()->weight, g, static_cast<int>(cfg.layers) + 1);
  }
  // inv_freq as _compute_default_rope_parameters and _compute_llama3_parameters make it, in
  // float32: θ^(-2j/D), then Llama 3.1's scaling (REFERENCE.md) where a factor is given.
  const double D = static_cast<double>(cfg.head_dim);
  torch::Tensor inv =
      1.0 / torch::pow(cfg.rope_theta,
                       torch::arange(0, cfg.head_dim, 2, torch::kLong).to(torch::kFloat) / D);
  const RopeScaling& r = cfg.rope_scaling;
  if (r.factor != 0) {
    const double orig = static_cast<double>(r.original_max_position);
    const double low_wavelen = orig / r.low_freq_factor, high_wavelen = orig / r.high_freq_factor;
    torch::Tensor wavelen = 2 * std::numbers::pi / inv;
    torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv / r.factor, inv);
    torch::Tensor smooth =
        (orig / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    torch::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
    torch::Tensor medium =
        (wavelen < high_wavelen).logical_not() * (wavelen > low_wavelen).logical_not();
    inv = torch::where(medium, smoothed, scaled);
  }
  inv_freq_ = inv;
  reset_parameters();
}

void Llama::reset_parameters() {
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* l = m->as<torch::nn::Linear>()) {
      torch::nn::init::normal_(l->weight, 0.0, 0.02);
      if (l->bias.defined()) torch::nn::init::zeros_(l->bias);
    } else if (auto* e = m->as<torch::nn::Embedding>()) {
      torch::nn::init::normal_(e->weight, 0.0, 0.02);
    } else if (auto* n = m->as<RmsNorm>()) {
      n->weight.fill_(1.0);
    }
  }
}

const std::pair<torch::Tensor, torch::Tensor>& Llama::rotary(int64_t T,
                                                             const torch::Device& device) {
  if (T != rotary_len_ || device != rotary_device_) {
    // freqs (T, D/2) = position × inv_freq; emb = [freqs, freqs] (T, D).
    torch::Tensor pos =
        torch::arange(T, torch::TensorOptions().dtype(torch::kLong)).to(torch::kFloat);
    torch::Tensor freqs = pos.unsqueeze(1) * inv_freq_.unsqueeze(0);
    torch::Tensor emb = torch::cat({freqs, freqs}, -1);
    rotary_ = {emb.cos().to(device), emb.sin().to(device)};
    rotary_len_ = T;
    rotary_device_ = device;
  }
  return rotary_;
}

std::function<torch::Tensor(const torch::Tensor&)> Llama::attention_region(size_t i,
                                                                           const torch::Tensor& x) {
  auto* layer = layers_->ptr(i)->as<DecoderLayer>();
  // (With sequence parallelism x holds T / tp positions; attention sees all T.)
  const auto& [cos32, sin32] = rotary(x.size(1) * (sp_ ? tp_size_ : 1), x.device());
  // The rotary tables in the residual stream's dtype, as transformers' rotary forward returns them.
  torch::Tensor cos = cos32.to(x.scalar_type()), sin = sin32.to(x.scalar_type());
  std::string* backend = &attention_backend_;
  // The attention half with its residual: x's three uses (the residual, the norm's square and
  // its scaling) then sum their gradients inside one graph, in the order an unchecked backward
  // sums them, so selective checkpointing changes no bit either.
  return [layer, cos, sin, backend](const torch::Tensor& h) {
    return h + layer->attention_half(h, cos, sin, backend);
  };
}

torch::Tensor Llama::block(size_t i, const torch::Tensor& x) {
  auto* layer = layers_->ptr(i)->as<DecoderLayer>();
  Region attention = attention_region(i, x);
  Region whole = [layer, attention](const torch::Tensor& h) {
    torch::Tensor y = attention(h);
    return y + layer->mlp_half(y);
  };
  switch (checkpoint_) {
    case ActivationCheckpoint::kFull:
      return checkpointed(whole, x, &recompute_seconds_);
    case ActivationCheckpoint::kSelective: {
      torch::Tensor y = checkpointed(attention, x, &recompute_seconds_);
      return y + layer->mlp_half(y);
    }
    case ActivationCheckpoint::kNone:
      break;
  }
  return whole(x);
}

torch::Tensor Llama::head(const torch::Tensor& x) {
  if (tp_) tp_->set_site(static_cast<int>(cfg_.layers) + 1);
  torch::Tensor h = norm_->as<RmsNorm>()->forward(x);
  h = column_input(h, tp_.get(), sp_);  // the head is column-parallel: V/T logits a rank
  return deferrable_linear(h, lm_head_ ? lm_head_->weight : embed_tokens_->weight);
}

torch::Tensor Llama::embed(const torch::Tensor& tokens) {
  if (!tp_) return embed_tokens_(tokens);
  tp_->set_site(0);
  return vocab_parallel_embedding(tokens, embed_tokens_->weight,
                                  tp_rank_ * embed_tokens_->weight.size(0), tp_.get(), sp_);
}

TensorMap Llama::tp_slices(const TensorMap& whole) const {
  return tp_slices_of(*this, whole, tp_rank_, tp_size_);
}

torch::Tensor Llama::forward(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  if (T > cfg_.context)
    throw UsageError("sequence length " + std::to_string(T) + " exceeds the model's context " +
                     std::to_string(cfg_.context) + " (--context)");
  torch::Tensor x = embed(tokens);  // (B, T, C)
  for (size_t i = 0; i < layers_->size(); ++i) x = block(i, x);
  return head(x);  // (B, T, V)
}

std::vector<Piece> Llama::pieces() {
  // MACs per sample as flops() counts them.
  const double C = static_cast<double>(cfg_.width), T = static_cast<double>(cfg_.context);
  const double HD = static_cast<double>(cfg_.heads * cfg_.head_dim);
  const double KD = static_cast<double>(cfg_.kv_heads * cfg_.head_dim);
  const double I = static_cast<double>(cfg_.intermediate), V = static_cast<double>(cfg_.vocab);
  const double block_macs = (C * (2 * HD + 2 * KD) + 3 * C * I + HD * T) * T;
  auto names = [this](const std::string& prefix) {
    std::vector<std::string> out;
    for (const auto& p : named_parameters())
      if (p.key().starts_with(prefix)) out.push_back(p.key());
    return out;
  };
  std::vector<Piece> out;
  out.push_back({"embed", PieceKind::kFirst,
                 [this](const torch::Tensor& tokens) { return embed(tokens); },
                 names("model.embed_tokens."), 0.0, ""});
  for (size_t i = 0; i < layers_->size(); ++i) {
    const std::string name = "layers." + std::to_string(i), prefix = "model." + name + ".";
    out.push_back({name, PieceKind::kBlock,
                   [this, i](const torch::Tensor& x) { return block(i, x); }, names(prefix),
                   block_macs, ""});
  }
  Piece last{"head",
             PieceKind::kLast,
             [this](const torch::Tensor& x) { return head(x); },
             names("model.norm."),
             V * C * T,
             ""};
  last.parameters.push_back(lm_head_ ? "lm_head.weight" : "model.embed_tokens.weight");
  out.push_back(std::move(last));
  return out;
}

torch::Tensor Llama::loss(const torch::Tensor& logits, const torch::Tensor& target) {
  if (tp_) {  // this rank's V/T logits; the loss is the head's site
    tp_->set_site(static_cast<int>(cfg_.layers) + 1);
    return vocab_parallel_cross_entropy(logits, target, tp_rank_ * logits.size(-1), tp_.get());
  }
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat),
                          target.reshape({-1}), F::CrossEntropyFuncOptions().ignore_index(-1));
}

std::pair<torch::Tensor, torch::Tensor> Llama::synthetic_batch(int64_t batch,
                                                               const torch::Device& device,
                                                               uint64_t seed) const {
  auto gen = at::detail::createCPUGenerator(seed);
  torch::Tensor seq = at::randint(cfg_.vocab, {batch, cfg_.context + 1}, gen, torch::kLong);
  using torch::indexing::Slice;
  return {seq.index({Slice(), Slice(0, -1)}).contiguous().to(device),
          seq.index({Slice(), Slice(1, torch::indexing::None)}).contiguous().to(device)};
}

FlopCount Llama::flops() const {
  // Split over a tensor-parallel group, the model is still one model: its count, by arithmetic.
  if (tp_) return llama_size(cfg_).flops;
  // Per token, then × T. Forward MACs from the layers built: each Linear's weight (q and o H·D·C,
  // k and v K·D·C, gate, up and down C·I each), the head V·C (tied or not: the matmul is done), and
  // attention's Q·Kᵀ and A·V over the causal half, T/2 keys a query: H·D·T a layer.
  // Training FLOPs as torchtitan counts Llama 3 (models/llama3/model/args.py,
  // get_nparams_and_flops): 6·N' + 12·L·H·D·T, N' the parameters less the token embedding (its
  // lookup is no matmul), the head's V·C counted, tied or not (torchtitan's Llamas are untied);
  // 12·L·H·D·T = 3 (forward + backward) × 2 FLOPs a MAC × 2 matmuls × H·D·T, the full square, not
  // the causal half (the convention). GQA changes N' (smaller k and v), not the attention term.
  // Beside it PaLM's 6N + 12·L·H·D·T with every parameter (the tied embedding once).
  const double L = static_cast<double>(cfg_.layers), C = static_cast<double>(cfg_.width);
  const double T = static_cast<double>(cfg_.context), V = static_cast<double>(cfg_.vocab);
  const double HD = static_cast<double>(cfg_.heads * cfg_.head_dim);
  double matmul_macs = V * C;
  for (const auto& m : layers_->modules(/*include_self=*/false))
    if (auto* l = m->as<torch::nn::Linear>())
      matmul_macs += static_cast<double>(l->options.in_features() * l->options.out_features());
  const double N = static_cast<double>(parameter_count(*this));
  const double n_matmul = N - V * C + (cfg_.tied_embedding ? V * C : 0.0);
  FlopCount f;
  f.tokens = T;
  f.forward_macs = (matmul_macs + L * HD * T) * T;
  f.training_flops = (6 * n_matmul + 12 * L * HD * T) * T;
  f.formula = "6N'+12LHDT (torchtitan; N' without the token embedding, with the head)";
  f.alt_training_flops = (6 * N + 12 * L * HD * T) * T;
  f.alt_formula = "6N+12LHDT (PaLM)";
  return f;
}

}  // namespace dtune::models
