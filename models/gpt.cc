// GPT-2 in LibTorch. Shapes: B batch, T sequence, C width, nh heads, hs = C / nh, V vocabulary.
#include "models/gpt.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/init.h>

#include <cmath>

#include "core/error.h"
#include "models/tensor_parallel.h"
#include "models/weight_grad_store.h"

namespace dtune::models {
namespace {

namespace F = torch::nn::functional;

torch::nn::LayerNorm layer_norm(int64_t c) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c}).eps(1e-5));
}

// With tensor parallelism over t ranks (Megatron's split): c_attn and c_fc column-parallel (a rank
// holds nh/t heads of each of q, k and v, and 4C/t of the MLP), both c_proj row-parallel, the
// LayerNorms and the position embedding whole.
class CausalSelfAttention : public torch::nn::Module {
 public:
  CausalSelfAttention(int64_t c, int64_t heads, std::string* backend, int64_t t, TpGroup* tp)
      : heads_(heads / t), backend_(backend), tp_(tp) {
    c_attn = register_module("c_attn", torch::nn::Linear(c, 3 * c / t));
    c_proj = register_module("c_proj", torch::nn::Linear(c / t, c));
  }
  torch::Tensor forward(const torch::Tensor& x_in) {
    const torch::Tensor x = column_input(x_in, tp_, false);
    const int64_t B = x.size(0), T = x.size(1), C = c_proj->options.in_features();  // this rank's
    auto qkv = deferrable_linear(c_attn, x).split(C, 2);                            // 3 x (B, T, C)
    auto heads = [&](const torch::Tensor& t) {
      return t.view({B, T, heads_, C / heads_}).transpose(1, 2);
    };
    torch::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    if (backend_->empty())  // the kernel SDPA picks for these shapes, dtype and device
      *backend_ = sdp_backend_name(at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true));
    torch::Tensor y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                       /*is_causal=*/true);  // (B, nh, T, hs)
    return row_parallel(c_proj, y.transpose(1, 2).contiguous().view({B, T, C}), tp_, false);
  }
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};

 private:
  int64_t heads_;         // this rank's
  std::string* backend_;  // the model's record of it
  TpGroup* tp_;
};

class Mlp : public torch::nn::Module {
 public:
  Mlp(int64_t c, int64_t t, TpGroup* tp) : tp_(tp) {
    c_fc = register_module("c_fc", torch::nn::Linear(c, 4 * c / t));
    c_proj = register_module("c_proj", torch::nn::Linear(4 * c / t, c));
  }
  torch::Tensor forward(const torch::Tensor& x_in) {
    const torch::Tensor x = column_input(x_in, tp_, false);
    return row_parallel(
        c_proj, F::gelu(deferrable_linear(c_fc, x), F::GELUFuncOptions().approximate("tanh")), tp_,
        false);
  }
  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};

 private:
  TpGroup* tp_;
};

class Block : public torch::nn::Module {
 public:
  // `site`: the block's in the per-layer tensor-parallel figures (TpGroup::set_site).
  Block(int64_t c, int64_t heads, std::string* backend, int64_t t, TpGroup* tp, int site)
      : tp_(tp), site_(site) {
    ln_1 = register_module("ln_1", layer_norm(c));
    attn = register_module("attn", std::make_shared<CausalSelfAttention>(c, heads, backend, t, tp));
    ln_2 = register_module("ln_2", layer_norm(c));
    mlp = register_module("mlp", std::make_shared<Mlp>(c, t, tp));
  }
  torch::Tensor forward(torch::Tensor x) {
    if (tp_) tp_->set_site(site_);
    x = x + attn->forward(ln_1(x));
    return x + mlp->forward(ln_2(x));
  }
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<Mlp> mlp;

 private:
  TpGroup* tp_;
  int site_;
};

double linear_macs(const torch::nn::LinearImpl& l) {
  return static_cast<double>(l.options.in_features() * l.options.out_features());
}

}  // namespace

Gpt::Gpt(const GptConfig& cfg, std::shared_ptr<TpGroup> tp) : cfg_(cfg) {
  DTUNE_CHECK(cfg.width % cfg.heads == 0, "GPT width must divide by the number of heads");
  if (tp && tp->size() > 1) {
    tp_ = std::move(tp);
    tp_size_ = tp_->size();
    tp_rank_ = tp_->rank();
    for (const auto& [n, v] :
         {std::pair<const char*, int64_t>{"heads", cfg.heads}, {"vocabulary (--vocab)", cfg.vocab}})
      if (v % tp_size_ != 0)
        throw UsageError("--tp " + std::to_string(tp_size_) + " does not divide " + cfg.name +
                         "'s " + n + " " + std::to_string(v) +
                         " (tensor parallelism splits it evenly; Megatron pads the vocabulary: "
                         "give --vocab a multiple)");
  }
  const int64_t t = tp_size_;
  transformer_ = register_module("transformer", std::make_shared<torch::nn::Module>());
  wte_ = transformer_->register_module("wte", torch::nn::Embedding(cfg.vocab / t, cfg.width));
  wpe_ = transformer_->register_module("wpe", torch::nn::Embedding(cfg.context, cfg.width));
  h_ = transformer_->register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.layers; ++i)
    h_->push_back(std::make_shared<Block>(cfg.width, cfg.heads, &attention_backend_, t, tp_.get(),
                                          static_cast<int>(i) + 1));
  ln_f_ = transformer_->register_module("ln_f", layer_norm(cfg.width));
  reset_parameters();
}

void Gpt::reset_parameters() {
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* l = m->as<torch::nn::Linear>()) {
      torch::nn::init::normal_(l->weight, 0.0, 0.02);
      if (l->bias.defined()) torch::nn::init::zeros_(l->bias);
    } else if (auto* e = m->as<torch::nn::Embedding>()) {
      torch::nn::init::normal_(e->weight, 0.0, 0.02);
    }
  }
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg_.layers));
  for (auto& p : named_parameters())
    if (p.key().size() >= 13 && p.key().compare(p.key().size() - 13, 13, "c_proj.weight") == 0)
      torch::nn::init::normal_(p.value(), 0.0, proj_std);
}

torch::Tensor Gpt::forward(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  if (T > cfg_.context)
    throw UsageError("sequence length " + std::to_string(T) + " exceeds the model's context " +
                     std::to_string(cfg_.context) + " (--context)");
  torch::Tensor x = embed(tokens);  // (B, T, C)
  for (const auto& block : *h_) x = block->as<Block>()->forward(x);
  return head(x);
}

torch::Tensor Gpt::embed(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  torch::Tensor pos =
      torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  if (tp_) tp_->set_site(0);
  torch::Tensor tok = tp_ ? vocab_parallel_embedding(tokens, wte_->weight,
                                                     tp_rank_ * wte_->weight.size(0), tp_.get())
                          : wte_(tokens);
  return tok + wpe_(pos);  // (B, T, C)
}

torch::Tensor Gpt::head(const torch::Tensor& x) {
  // (B, T, V): the head is the token embedding, transposed (with a tp group, column-parallel:
  // this rank's V/T logits).
  if (tp_) tp_->set_site(static_cast<int>(cfg_.layers) + 1);
  return deferrable_linear(column_input(ln_f_(x), tp_.get(), false), wte_->weight);
}

TensorMap Gpt::tp_slices(const TensorMap& whole) const {
  // c_attn's rows are [q; k; v]: this rank's heads of each.
  auto qkv = [this](const std::string& name, const torch::Tensor& w, const torch::Tensor& mine) {
    if (!name.ends_with("c_attn.weight") && !name.ends_with("c_attn.bias")) return torch::Tensor();
    const int64_t part = mine.size(0) / 3, whole_part = w.size(0) / 3;
    std::vector<torch::Tensor> parts;
    for (int64_t s = 0; s < 3; ++s)
      parts.push_back(w.narrow(0, s * whole_part + tp_rank_ * part, part));
    return torch::cat(parts, 0);
  };
  return tp_slices_of(*this, whole, tp_rank_, tp_size_, qkv);
}

std::vector<Piece> Gpt::pieces() {
  // MACs per sample as flops() counts them: per token 12C² + T·C/2·2 a block, V·C the head.
  const double C = static_cast<double>(cfg_.width), T = static_cast<double>(cfg_.context);
  const double V = static_cast<double>(cfg_.vocab);
  auto names = [this](const std::string& prefix) {
    std::vector<std::string> out;
    for (const auto& p : named_parameters())
      if (p.key().starts_with(prefix)) out.push_back(p.key());
    return out;
  };
  std::vector<Piece> out;
  Piece embed{"embed", PieceKind::kFirst,
              [this](const torch::Tensor& tokens) { return this->embed(tokens); },
              names("transformer.wte."), 0.0};
  for (const auto& n : names("transformer.wpe.")) embed.parameters.push_back(n);
  out.push_back(std::move(embed));
  for (size_t i = 0; i < h_->size(); ++i) {
    auto block = h_->ptr(i);
    const std::string name = "h." + std::to_string(i), prefix = "transformer." + name + ".";
    out.push_back({name, PieceKind::kBlock,
                   [block](const torch::Tensor& x) { return block->as<Block>()->forward(x); },
                   names(prefix), (12 * C * C + T * C) * T});
  }
  Piece head{"head", PieceKind::kLast, [this](const torch::Tensor& x) { return this->head(x); },
             names("transformer.ln_f."), V * C * T};
  head.parameters.push_back("transformer.wte.weight");
  out.push_back(std::move(head));
  return out;
}

torch::Tensor Gpt::loss(const torch::Tensor& logits, const torch::Tensor& target) {
  if (tp_) {  // this rank's V/T logits; the loss is the head's site
    tp_->set_site(static_cast<int>(cfg_.layers) + 1);
    return vocab_parallel_cross_entropy(logits, target, tp_rank_ * logits.size(-1), tp_.get());
  }
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat),
                          target.reshape({-1}), F::CrossEntropyFuncOptions().ignore_index(-1));
}

std::pair<torch::Tensor, torch::Tensor> Gpt::synthetic_batch(int64_t batch,
                                                             const torch::Device& device,
                                                             uint64_t seed) const {
  auto gen = at::detail::createCPUGenerator(seed);
  // T + 1 tokens: inputs are the first T, targets the next T (language modelling).
  torch::Tensor seq = at::randint(cfg_.vocab, {batch, cfg_.context + 1}, gen, torch::kLong);
  using torch::indexing::Slice;
  return {seq.index({Slice(), Slice(0, -1)}).contiguous().to(device),
          seq.index({Slice(), Slice(1, torch::indexing::None)}).contiguous().to(device)};
}

FlopCount Gpt::flops() const {
  // Per token (L layers, C width, T context, V vocabulary), then x T tokens per sample.
  // Counted forward, from the layers built, in MACs: each Linear's weight (c_attn 3C², attn.c_proj
  // C², c_fc 4C², mlp.c_proj 4C²: 12C² a layer), the tied head (V x C), and attention's two matmuls
  // Q·Kᵀ and A·V, where under the causal mask a query meets T/2 keys on average: T·C/2 MACs each,
  // L·T·C in all. Biases, LayerNorm, GELU, softmax and embedding lookups are no matmuls: left out.
  // Training FLOPs, llm.c's convention (train_gpt2.cu, gpt2_estimate_mfu, after Kaplan et al. 2020
  // section 2.1): 6N + 6LCT, N = model->num_parameters, i.e. every parameter with the tied token
  // embedding once, the position embedding, biases and LayerNorm included ("over-estimating ... but
  // these are very small terms"); 6LCT = 3 (forward + backward) x 2 FLOPs per MAC x the L·T·C
  // attention MACs above. So 6 x counted forward MACs equals the formula less 6 x (biases +
  // LayerNorm + position embedding) per token, exactly.
  // Beside it, PaLM's (Chowdhery et al. 2022, appendix B) as nanoGPT's model.py estimate_mfu writes
  // it: 6N + 12·L·H·Q·T with H·Q = C and N = get_num_params(), all parameters less the position
  // embedding; attention counted in full, without the causal half.
  const double L = static_cast<double>(cfg_.layers), C = static_cast<double>(cfg_.width);
  const double T = static_cast<double>(cfg_.context), V = static_cast<double>(cfg_.vocab);
  double matmul_macs = V * C;
  for (const auto& m : h_->modules(/*include_self=*/false))
    if (auto* l = m->as<torch::nn::Linear>()) matmul_macs += linear_macs(*l);
  const double attention_macs = L * T * C;
  double N = static_cast<double>(parameter_count(*this));
  if (tp_) {  // split over a tp group the model is still one model: the whole one's, by arithmetic
    matmul_macs = V * C + L * 12 * C * C;  // c_attn 3C², attn.c_proj C², c_fc 4C², mlp.c_proj 4C²
    N = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;  // + biases and LayerNorms, ln_f
  }
  const double N_without_wpe = N - static_cast<double>(wpe_->weight.numel());
  FlopCount f;
  f.tokens = T;
  f.forward_macs = (matmul_macs + attention_macs) * T;
  f.training_flops = (6 * N + 6 * L * C * T) * T;
  f.formula = "6N+6LCT (llm.c)";
  f.alt_training_flops = (6 * N_without_wpe + 12 * L * C * T) * T;
  f.alt_formula = "6N+12LCT (PaLM, nanoGPT)";
  return f;
}

}  // namespace dtune::models
