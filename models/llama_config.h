// The Llama family's shapes, without torch: the published Llama 3.x configurations by name and any
// LlamaForCausalLM config.json (`--model hf:PATH`), what llama.h builds and model_size.h counts.
// Field names and meanings follow Hugging Face's LlamaConfig (transformers 5: rope_parameters; 4:
// rope_theta and rope_scaling), so a config.json read here means what it means to transformers.
#pragma once

#include <cstdint>
#include <string>

#include "models/model_options.h"

namespace dtune::models {

// Llama 3.1's RoPE frequency scaling (rope_type "llama3"; REFERENCE.md): factor 0 means none.
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_max_position = 8192;
};

struct LlamaConfig {
  std::string name = "llama3-tiny";
  int64_t layers = 2;           // num_hidden_layers
  int64_t width = 128;          // hidden_size
  int64_t heads = 4;            // num_attention_heads
  int64_t kv_heads = 2;         // num_key_value_heads (grouped-query attention: heads / kv_heads
                                // query heads share one key/value head)
  int64_t head_dim = 32;        // head_dim (hidden_size / heads unless the config says otherwise)
  int64_t intermediate = 352;   // intermediate_size of the SwiGLU MLP
  int64_t vocab = 1024;         // vocab_size
  int64_t context = 128;        // the training sequence length T (--context)
  bool tied_embedding = false;  // tie_word_embeddings: the head is the token embedding
  bool attention_bias = false;  // q/k/v/o projections with biases
  bool mlp_bias = false;        // gate/up/down projections with biases
  double rms_eps = 1e-5;        // rms_norm_eps
  double rope_theta = 500000;   // rope_theta
  RopeScaling rope_scaling;
};

// The --model names of the family: llama3-tiny (a CPU test size: 2 layers, 128 wide, 4 heads over
// 2 KV heads of 32, MLP 352, vocabulary 1,024, context 128, untied, Llama 3.1's rope scaling with
// original context 64 so that it bends frequencies at that length), llama3.2-1b, llama3.2-3b,
// llama3.1-8b, llama3.1-70b and llama3.1-405b with the published shapes (REFERENCE.md; context
// 8192, torchtitan's training length), and "hf:PATH" (hf_llama_config). ModelOptions override
// context, vocab and layers. Throws UsageError for anything else or a shape that cannot be built.
LlamaConfig llama_config(const std::string& name, const ModelOptions& o);

// A Hugging Face config.json (PATH is the file or its directory) of LlamaForCausalLM. An unknown
// architecture, model_type, hidden_act, rope type or field is refused naming it, as is a head count
// that does not divide the width (without head_dim) or KV heads that do not divide the heads. The
// context is max_position_embeddings capped at 8192.
LlamaConfig hf_llama_config(const std::string& path);

// "hf:PATH" names a Hugging Face model directory (or its config.json).
bool is_hf_model(const std::string& name);

}  // namespace dtune::models
