// dtune-data make: datasets written where a loader will read them (a directory or s3://), since
// none can be downloaded here. Images: WebDataset shards (or an ImageFolder tree) of real JPEGs
// with class structure (data/image/synthetic.h); tokens: llm.c shards from text files with the
// byte-level tokenizer. Both end with a dataset.json manifest. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/storage/storage.h"

namespace dtune::data {

struct MakeImagesOptions {
  std::string out;
  int64_t samples = 1000;
  int classes = 10;
  int width = 500, height = 375;  // a typical photo (ImageNet's median is about this)
  double size_jitter = 0;         // each side scaled by a factor in [1 - j, 1 + j]
  int64_t shard_samples = 1000;
  int quality = 90;
  uint64_t seed = 0;
  std::string layout = "webdataset";  // or "imagefolder"
};

struct MakeTokensOptions {
  std::string out;
  std::vector<std::string> inputs;  // text files
  int64_t shard_tokens = 1 << 24;
  int repeat = 1;  // concatenate the inputs this many times (for size)
};

// "stem-000042.ext": the names of shards and samples.
std::string numbered(const std::string& stem, int64_t i, const std::string& ext);
// --out: a local directory is created (with its parents); an S3 bucket must exist (UsageError).
std::unique_ptr<Storage> open_storage_for_writing(const std::string& url);

// Both print one line per shard written and a summary; return what they wrote as a description.
std::string make_images(const MakeImagesOptions& o);
std::string make_tokens(const MakeTokensOptions& o);
// dtune-data index: (re)writes dataset.json for the data under `url`.
std::string index_data(const std::string& url);

}  // namespace dtune::data
