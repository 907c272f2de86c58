// A dataset as the loader sees it: the objects it lives in (shards or files, relative to the
// storage root) and a table of samples, each a byte range of one object with its label. Three
// layouts: WebDataset image shards (*.tar of JPEG + class label), an ImageFolder tree
// (root/<class>/<image>.jpg, classes in sorted order as torchvision numbers them) and llm.c token
// shards (*.bin). dtune-data writes a dataset.json manifest beside the data (the index: object
// sizes and every sample's offset, size and label), so that opening a dataset costs one small read
// even on remote storage; without one, the root is indexed on the spot. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/storage/storage.h"

namespace dtune::data {

enum class DatasetKind { kImages, kTokens };

struct SampleRef {
  uint32_t object = 0;  // index into Dataset::objects
  int64_t offset = 0, size = 0;
  int32_t label = 0;  // class (images); unused for tokens
};

struct Dataset {
  DatasetKind kind = DatasetKind::kImages;
  std::string format;  // "webdataset", "imagefolder" or "tokens"
  std::vector<ObjectInfo> objects;
  std::vector<SampleRef> samples;  // images; token windows come from token_windows()
  int num_classes = 0;
  int64_t tokens = 0;            // token datasets: total tokens
  int vocab = 0;                 // token datasets: 256 for the byte tokenizer, 0 unknown
  std::string describe() const;  // one line: format, objects, samples, classes
};

inline constexpr const char* kManifestKey = "dataset.json";

std::string manifest_to_json(const Dataset& d);
// Throws dtune::Error naming `what` when the text is not a dtune manifest.
Dataset manifest_from_json(const std::string& text, const std::string& what);

// Scans the root: *.tar shards (WebDataset), class folders of images (ImageFolder) or *.bin token
// shards. Reads every shard's headers (for tar, the whole shard). Throws UsageError when the root
// holds none of these.
Dataset index_dataset(Storage& s);

// dataset.json if present, else index_dataset(), then validate_dataset(). Checks that every object
// exists; an object shorter than the manifest says (a truncated shard) is kept, its missing samples
// will read short and be counted as bad. `*indexed` tells whether the root had to be indexed.
Dataset open_dataset(Storage& s, bool* indexed = nullptr);

// Every record checked before any sample is read, so that a bad one stops every rank at open
// (UsageError naming the sample, its object, the field and what to fix) instead of one rank's
// slice in the middle of a run. Images: the object exists, offset >= 0, size > 0, offset + size
// within the object's size as listed, label in 0..num_classes-1. Tokens: each shard's header as
// llm.c checks it (magic, version, size = header + 2 bytes per token) and the total token count.
// `source` names where the records came from (the manifest, or the index made on the spot).
void validate_dataset(Storage& s, const Dataset& d, const std::string& source);

// Token windows of context T: T + 1 tokens every T tokens within each shard (drops a shard's tail
// shorter than T + 1). Byte offsets include the shard header.
std::vector<SampleRef> token_windows(const Dataset& d, int context);

}  // namespace dtune::data
