// dtune-data convert: your own data into the shards dtune's loader reads. Images: an ImageFolder
// tree (SRC/<class>/<image>, labels from the sorted folder names as torchvision numbers them) or a
// flat folder of images (one class), JPEGs kept byte for byte, PNGs transcoded to JPEG at
// --quality (or refused with --no-transcode), into WebDataset shards of about --shard-mb each
// with dataset.json and classes.txt beside them. Tokens: text files through the byte-level
// tokenizer into llm.c shards (make_tokens). Every file left out is counted by cause and named.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/progress.h"

namespace dtune::data {

struct ConvertImagesOptions {
  std::string src;  // directory or s3://bucket/prefix
  std::string out;  // directory or s3://bucket/prefix
  double shard_mb = 256;
  int quality = 90;  // for transcoded images
  bool transcode = true;
  bool overwrite = false;  // write into a non-empty --out
  uint64_t seed = 0;       // the order of samples across shards
  ProgressMode progress = ProgressMode::kAuto;
};

struct ConvertTokensOptions {
  std::vector<std::string> src;  // text files, or directories of them (recursively)
  std::string out;
  int64_t shard_tokens = 1 << 24;
  bool overwrite = false;  // write into a non-empty --out
  ProgressMode progress = ProgressMode::kAuto;
};

// A file left out and why ("not an image (.txt)", "undecodable JPEG: ...").
struct Skipped {
  std::string path, reason;
};

struct ConvertSummary {
  int64_t converted = 0, kept = 0, transcoded = 0;  // kept: JPEGs copied as they are
  std::vector<Skipped> skipped;
  std::string description;  // what was written, one line
};

// Both print the summary on stdout (counts, then every skipped file on a line of its own) and
// return it. UsageError when nothing can be converted, when --out is the source or inside it (the
// next convert would read the shards as a class), and when --out already holds files and
// `overwrite` is off. A file or folder that cannot be read, a symlink that is not followed and a
// second link to a file already read are skipped and named, never fatal.
ConvertSummary convert_images(const ConvertImagesOptions& o);
ConvertSummary convert_tokens(const ConvertTokensOptions& o);

}  // namespace dtune::data
