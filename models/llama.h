// The Llama family as Hugging Face's LlamaForCausalLM builds it: token embedding, pre-RMSNorm
// decoder layers (grouped-query causal attention with rotary positions through LibTorch's fused
// scaled-dot-product attention; SwiGLU MLP), a final RMSNorm and the output head (its own lm_head,
// or the token embedding when tied). Parameter names are LlamaForCausalLM's state_dict names
// (model.embed_tokens.weight, model.layers.0.self_attn.q_proj.weight, ..., lm_head.weight), so a
// save_pretrained checkpoint loads by name (--init-from). Shapes: B batch, T sequence, C width,
// H heads, K KV heads, D head size, I intermediate, V vocabulary. With tensor parallelism over T
// ranks (Megatron's layout) each rank holds H/T query heads and K/T KV heads (column-parallel
// q/k/v, row-parallel o), I/T of the MLP (column-parallel gate and up, row-parallel down) and V/T
// rows of the embedding and the head; the norms are whole on every rank. With sequence
// parallelism the residual stream between the layers is cut along the sequence, T/T' positions a
// rank, all-gathered before the column-parallel layers and reduce-scattered after the row-parallel
// ones (the same bytes as the all-reduces it replaces).
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <functional>

#include "models/llama_config.h"
#include "models/model.h"
#include "models/pieces.h"
#include "models/tensor_parallel.h"
#include "models/weights.h"

namespace dtune::models {

class Llama : public Model {
 public:
  // `tp`: the tensor-parallel group (null: none); its size must divide H, K, I and V.
  // `sequence_parallel` (with tp): Megatron's sequence parallelism, the residual stream and the
  // norms cut along the sequence (the context a multiple of the group's size).
  Llama(const LlamaConfig& cfg, ActivationCheckpoint checkpoint,
        std::shared_ptr<TpGroup> tp = nullptr, bool sequence_parallel = false);
  std::string name() const override { return cfg_.name; }
  torch::Tensor forward(const torch::Tensor& tokens) override;  // (B, T) -> (B, T, V)
  torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& target) override;
  std::pair<torch::Tensor, torch::Tensor> synthetic_batch(int64_t batch,
                                                          const torch::Device& device,
                                                          uint64_t seed) const override;
  FlopCount flops() const override;
  std::string attention_backend() const override { return attention_backend_; }
  // Hugging Face's _init_weights: N(0, initializer_range 0.02) for Linear and Embedding weights,
  // zero biases, RMSNorm weights 1.
  void reset_parameters();
  const LlamaConfig& config() const { return cfg_; }
  // Pipeline split (models/pieces.h): embed (embed_tokens), one piece per decoder layer
  // ("layers.i"), head (the final norm and lm_head, or the tied embedding).
  std::vector<Piece> pieces();
  // This rank's slices of a whole model's tensors (a checkpoint, or the whole model's own
  // initialisation): each parameter's, cut where its shape is 1/T of the whole one's.
  TensorMap tp_slices(const TensorMap& whole) const override;

 private:
  // The token embedding: vocabulary-parallel (tensor_parallel.h) with a tp group.
  torch::Tensor embed(const torch::Tensor& tokens);
  torch::Tensor block(size_t i, const torch::Tensor& x);
  // Layer i's attention half with its residual, as a checkpointable region.
  std::function<torch::Tensor(const torch::Tensor&)> attention_region(size_t i,
                                                                      const torch::Tensor& x);
  torch::Tensor head(const torch::Tensor& x);
  // cos and sin of the rotary angles for positions 0..T-1, (T, D) each, float32 as HF computes
  // them (inv_freq, Llama 3.1's scaling, then the angles), cached per length and device.
  const std::pair<torch::Tensor, torch::Tensor>& rotary(int64_t T, const torch::Device& device);

  LlamaConfig cfg_;  // the whole model's shape
  ActivationCheckpoint checkpoint_;
  std::shared_ptr<TpGroup> tp_;
  int64_t tp_size_ = 1, tp_rank_ = 0;
  bool sp_ = false;  // sequence parallelism: blocks hold (B, T / tp, C)
  std::shared_ptr<torch::nn::Module> model_;
  torch::nn::Embedding embed_tokens_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  std::shared_ptr<torch::nn::Module> norm_;
  torch::nn::Linear lm_head_{nullptr};  // null when tied
  torch::Tensor inv_freq_;              // (D/2) float32, not a parameter nor a buffer
  int64_t rotary_len_ = -1;
  torch::Device rotary_device_{torch::kCPU};
  std::pair<torch::Tensor, torch::Tensor> rotary_;
  std::string attention_backend_;
};

}  // namespace dtune::models
