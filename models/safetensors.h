// Hugging Face's safetensors checkpoints read in C++ (--init-from): an 8-byte little-endian header
// length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}} (offsets into
// the bytes after the header; an optional "__metadata__"), then the raw little-endian tensors. A
// sharded checkpoint adds model.safetensors.index.json, whose "weight_map" names each tensor's
// file. Every size the header claims is checked against the file before anything is read or
// allocated.
#pragma once

#include <string>

#include "models/weights.h"

namespace dtune::models {

// One .safetensors file. Throws UsageError naming the file and the tensor or field that is wrong:
// a truncated file, a header that lies about sizes or overlaps, an unknown dtype.
TensorMap read_safetensors(const std::string& path);

// The weights at `path` for --init-from: a .safetensors file, a model.safetensors.index.json (every
// shard it names), a torch.save file (.pt, .pth: weights.h), or a directory holding
// model.safetensors.index.json or model.safetensors.
TensorMap read_checkpoint(const std::string& path);

}  // namespace dtune::models
