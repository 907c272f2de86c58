// GPT-2 configurations by name (gpt_config.h).
#include "models/gpt_config.h"

#include "core/error.h"

namespace dtune::models {

GptConfig gpt_config(const std::string& name, const ModelOptions& o) {
  GptConfig c;
  c.name = name;
  if (name == "gpt2-d6") {
    c.layers = 6;
    c.width = 384;
    c.heads = 6;
  } else if (name == "gpt2-d12") {
    c.layers = 12;
    c.width = 768;
    c.heads = 12;
  } else if (name == "gpt2-d24") {
    c.layers = 24;
    c.width = 1024;
    c.heads = 16;
  } else if (name == "gpt2-d36") {
    c.layers = 36;
    c.width = 1280;
    c.heads = 20;
  } else if (name == "gpt2-d48") {
    c.layers = 48;
    c.width = 1600;
    c.heads = 25;
  } else if (name == "gpt2-tiny") {
    c.layers = 2;
    c.width = 128;
    c.heads = 4;
    c.context = 128;
    c.vocab = 1024;
  } else
    throw UsageError("--model " + name +
                     ": not a GPT-2 model (gpt2-d6, -d12, -d24, -d36, -d48, -tiny)");
  if (o.context < 0 || o.vocab < 0 || o.layers < 0)
    throw UsageError("--context, --vocab and --layers must be positive");
  if (o.context > 0) c.context = o.context;
  if (o.vocab > 0) c.vocab = o.vocab;
  if (o.layers > 0) c.layers = o.layers;
  return c;
}

}  // namespace dtune::models
