// The GPT-2 family as nanoGPT and llm.c build it: learned token and position embeddings, pre-
// LayerNorm blocks (causal self-attention through LibTorch's fused scaled-dot-product attention,
// so flash attention runs on GPUs; GELU-tanh MLP of 4C), final LayerNorm, and an output head tied
// to the token embedding. Module names match nanoGPT's state_dict (transformer.wte,
// transformer.h.0.attn.c_attn, ...); its separate lm_head.weight is the same tensor as wte's.
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "models/gpt_config.h"
#include "models/model.h"
#include "models/pieces.h"
#include "models/tensor_parallel.h"
#include "models/weights.h"

namespace dtune::models {

class Gpt : public Model {
 public:
  // `tp`: the tensor-parallel group (null: none); its size must divide the heads and the
  // vocabulary.
  explicit Gpt(const GptConfig& cfg, std::shared_ptr<TpGroup> tp = nullptr);
  std::string name() const override { return cfg_.name; }
  torch::Tensor forward(const torch::Tensor& tokens) override;  // (B, T) -> (B, T, V)
  torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& target) override;
  std::pair<torch::Tensor, torch::Tensor> synthetic_batch(int64_t batch,
                                                          const torch::Device& device,
                                                          uint64_t seed) const override;
  FlopCount flops() const override;
  std::string attention_backend() const override { return attention_backend_; }
  // nanoGPT's initialisation: N(0, 0.02) for Linear and Embedding weights, zero biases, and
  // N(0, 0.02 / sqrt(2L)) for the residual projections (c_proj).
  void reset_parameters();
  const GptConfig& config() const { return cfg_; }
  // Pipeline split (models/pieces.h): embed (wte + wpe), one piece per block, head (ln_f and the
  // tied wte as the output projection).
  std::vector<Piece> pieces();
  // This rank's slices of a whole model's tensors (its heads of c_attn's q, k and v; 1/T of the
  // other split layers along the dimension that is 1/T here).
  TensorMap tp_slices(const TensorMap& whole) const override;

 private:
  torch::Tensor embed(const torch::Tensor& tokens);  // wte (vocabulary-parallel) + wpe
  torch::Tensor head(const torch::Tensor& x);        // ln_f, then the tied head
  GptConfig cfg_;
  std::shared_ptr<torch::nn::Module> transformer_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  torch::nn::ModuleList h_{nullptr};
  torch::nn::LayerNorm ln_f_{nullptr};
  std::string attention_backend_;  // set by the first forward's attention
  std::shared_ptr<TpGroup> tp_;
  int64_t tp_size_ = 1, tp_rank_ = 0;
};

}  // namespace dtune::models
