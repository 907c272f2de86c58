// What a dtune model is asked for and what it costs, without torch: the options every model family
// reads and the FLOP count MFU uses. Torch-free so that model_size.h (arithmetic only) and the
// binaries without LibTorch (dtune-comm --pattern fsdp) can include it.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

namespace dtune::models {

class TpGroup;  // tensor_parallel.h

// Per-sample cost. forward_macs is counted from the layers actually built; training_flops follows
// the model family's usual convention (`formula`, the one MFU uses), and alt_training_flops a
// second published one beside it for comparison (NaN where the family has none). See each model's
// flops().
struct FlopCount {
  double forward_macs = 0;    // multiply-accumulates of one sample's forward pass
  double training_flops = 0;  // by `formula`, per sample
  double alt_training_flops = std::numeric_limits<double>::quiet_NaN();  // by `alt_formula`
  double tokens = 1;        // tokens per sample (1 for images)
  std::string formula;      // e.g. "6N+6LCT (llm.c)", "3 x 2 x forward MACs"
  std::string alt_formula;  // e.g. "6N+12LCT (PaLM, nanoGPT)"; empty: none
};

// Activation checkpointing (models/checkpoint.h): none; full, every transformer block recomputed in
// the backward; selective, only each block's attention half (its norm, projections, rotary and
// attention), the MLP's activations kept.
enum class ActivationCheckpoint { kNone, kFull, kSelective };
// "none", "full", "selective"; the parse throws UsageError naming --activation-checkpoint.
const char* activation_checkpoint_name(ActivationCheckpoint a);
ActivationCheckpoint parse_activation_checkpoint(const std::string& s);

// Options shared by the model families; each family reads the ones it has.
struct ModelOptions {
  int64_t num_classes = 1000;  // ResNet
  int64_t image_size = 224;    // ResNet input height = width
  int64_t width = 64;          // ResNet base width (64 is torchvision's)
  int64_t context = 0;         // GPT context length T (0: the family's default)
  int64_t vocab = 0;           // transformer vocabulary (0: the family's default, 50,304 for GPT-2)
  int64_t layers = 0;          // transformer blocks or decoder layers L (0: the family's default)
  uint64_t seed = 1234;        // initialisation seed
  // Transformers: which activations the backward recomputes instead of keeping.
  ActivationCheckpoint activation_checkpoint = ActivationCheckpoint::kNone;
  // Weights to start from instead of the seed's (models/safetensors.h: a .safetensors file, a
  // sharded checkpoint's index or a directory holding either); empty: none.
  std::string init_from;
  // Tensor parallelism (tensor_parallel.h): this rank's group on the mesh's tp axis; null or of
  // size 1: none. The Llama family splits its layers over it.
  std::shared_ptr<TpGroup> tp;
  // Megatron's sequence parallelism over `tp` (--sequence-parallel).
  bool sequence_parallel = false;
};

}  // namespace dtune::models
