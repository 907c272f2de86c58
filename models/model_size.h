// A model's parameter count and FLOPs per sample by arithmetic from its configuration, without
// building it: `dtune-models list` answers in milliseconds instead of allocating every model (GPT-2
// d48 alone is 1.56 billion parameters, 6 GB). The same numbers the built models give
// (parameter_count, Model::flops), which tests/unit/models checks exactly for every model small
// enough to build in a unit test; the large GPTs are checked against their published counts.
// Torch-free (dtune_model_size): binaries without LibTorch link it (dtune-comm --pattern fsdp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_options.h"

namespace dtune::models {

// One piece of the model as FSDP wraps it for ZeRO-3: fully_shard on every transformer block or
// ResNet stage, and the rest in units of their own, as torchtitan wraps the embeddings and the
// final norm with the head.
struct ParamUnit {
  std::string name;        // GPT: "embed" (wte, wpe), "h.0".."h.<L-1>", "ln_f" (the head is the
                           // tied wte, counted in "embed"); ResNet: "stem" (conv1, bn1),
                           // "layer1".."layer4", "fc"; Llama: "embed", "layers.0".., "head"
                           // (the final norm, and lm_head when untied)
  int64_t parameters = 0;  // parameter elements of the unit
  // Of them, the elements --tp T cuts into T parts (each rank holds 1/T: the column- and
  // row-parallel weights, the column-parallel biases, the vocabulary-split embedding and head); the
  // rest (norms, row-parallel biases, GPT-2's positions) every rank holds whole.
  int64_t tp_split = 0;
};

// A transformer's shape (zeros for a ResNet): what `dtune model plan` counts a layout's
// tensor-parallel traffic and activations from (dtune-models list --json).
struct SequenceShape {
  int64_t layers = 0, width = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t mlp = 0;  // the MLP's inner width (GPT-2: 4C; Llama: intermediate_size, SwiGLU)
  int64_t vocab = 0, context = 0;
};

struct ModelSize {
  int64_t parameters = 0;  // distinct parameter elements (the tied GPT head counted once)
  FlopCount flops;
  std::vector<ParamUnit> units;  // in forward order; their parameters sum to `parameters`
  // Each parameter's elements in model order (the built model's named_parameters(); the tied GPT
  // head is wte, not listed again): what size-capped units and buckets are cut from.
  std::vector<int64_t> param_elems;
  // Its head is its token embedding (GPT-2, Llama 3.2 1B/3B): both end pipeline stages hold it.
  bool tied_embedding = false;
  SequenceShape shape;
};

// Throws UsageError for an unknown name or bad options, as make_model does (the family's size,
// family.h).
ModelSize model_size(const std::string& name, const ModelOptions& o);
// Each family's arithmetic, from its configuration.
struct GptConfig;
struct LlamaConfig;
struct ResNetConfig;
ModelSize gpt_size(const GptConfig& cfg);
ModelSize llama_size(const LlamaConfig& cfg);
ModelSize resnet_size(const ResNetConfig& cfg);

}  // namespace dtune::models
