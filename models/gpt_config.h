// The GPT-2 family's shapes by name, without torch: what gpt.h builds and what model_size.h counts
// from (so that binaries without LibTorch know a GPT's size).
#pragma once

#include <cstdint>
#include <string>

#include "models/model_options.h"

namespace dtune::models {

struct GptConfig {
  int64_t layers = 12;     // L
  int64_t width = 768;     // C
  int64_t heads = 12;      // nh; head size C / nh
  int64_t context = 1024;  // T
  int64_t vocab = 50304;   // GPT-2's 50,257 padded to a multiple of 128
  std::string name = "gpt2-d12";
};

// gpt2-d6, -d12, -d24, -d36, -d48 (llm.c's train_gpt2.cu, gpt_build_from_descriptor) and
// gpt2-tiny (2 layers, 128 wide, 4 heads, context 128, vocabulary 1,024: a CPU test size);
// ModelOptions override context, vocab and layers (the depth: e.g. 8 tiny blocks for a deep
// pipeline on CPU).
GptConfig gpt_config(const std::string& name, const ModelOptions& o);

}  // namespace dtune::models
