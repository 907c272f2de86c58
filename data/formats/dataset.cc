// Dataset manifests and indexing (see dataset.h).
#include "data/formats/dataset.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/progress.h"
#include "data/formats/tar.h"
#include "data/formats/token_shard.h"

namespace dtune::data {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_image_name(const std::string& key) {
  std::string lower = key;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ends_with(lower, ".jpg") || ends_with(lower, ".jpeg");
}

// WebDataset: labels from the .cls field (ASCII integer); samples without jpg/jpeg or cls, with a
// negative label or an empty image are left out (not an error).
void index_webdataset(Storage& s, Dataset& d) {
  int max_label = -1;
  // Every shard is read whole: on remote storage that takes a while (core/progress.h).
  Progress progress("dtune: indexing " + s.describe(), "shards",
                    static_cast<int64_t>(d.objects.size()), ProgressMode::kAuto);
  for (uint32_t o = 0; o < d.objects.size(); ++o) {
    progress.update(o);
    const std::string bytes = s.read(d.objects[o].key);
    bool truncated = false;
    for (const auto& sample : group_webdataset(scan_tar(bytes, &truncated))) {
      auto img = sample.fields.find("jpg");
      if (img == sample.fields.end()) img = sample.fields.find("jpeg");
      const auto cls = sample.fields.find("cls");
      if (img == sample.fields.end() || cls == sample.fields.end()) continue;
      int label = 0;
      try {
        label = std::stoi(bytes.substr(static_cast<size_t>(cls->second.offset),
                                       static_cast<size_t>(cls->second.size)));
      } catch (const std::exception&) {
        continue;
      }
      if (label < 0 || img->second.size <= 0) continue;
      d.samples.push_back({o, img->second.offset, img->second.size, label});
      max_label = std::max(max_label, label);
    }
  }
  d.num_classes = max_label + 1;
}

// llm.c's checks of a shard (llmc/dataloader.h, dataloader_load_shard_): magic, version, at least
// one token, and a size of exactly header + 2 bytes per token (here: the size dataset.json lists;
// a shard shorter on storage than that is truncated, and its windows are skipped as such).
void validate_token_shards(Storage& s, const Dataset& d, const std::string& source) {
  int64_t total = 0;
  for (const auto& o : d.objects) {
    const std::string at = source + ": token shard " + o.key + ": ";
    if (o.size_bytes < kTokenHeaderBytes)
      throw UsageError(at + "size " + std::to_string(o.size_bytes) +
                       " is shorter than the 1024-byte header; "
                       "re-make it (dtune-data make tokens) or re-run dtune-data index");
    int64_t count = 0;
    try {
      count = token_shard_count(s.read(o.key, 0, kTokenHeaderBytes), s.describe() + "/" + o.key);
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      throw UsageError(std::string(e.what()) + "; re-make it (dtune-data make tokens)");
    }
    if (count < 1 || kTokenHeaderBytes + 2 * count != o.size_bytes)
      throw UsageError(at + "its header declares " + std::to_string(count) +
                       " tokens, which take " + std::to_string(kTokenHeaderBytes + 2 * count) +
                       " bytes, but its size is " + std::to_string(o.size_bytes) +
                       "; re-make it or re-run dtune-data index");
    total += count;
  }
  if (d.tokens != total)
    throw UsageError(source + ": tokens " + std::to_string(d.tokens) +
                     " but the shards' headers declare " + std::to_string(total) +
                     "; re-run dtune-data index");
}

}  // namespace

std::string Dataset::describe() const {
  std::string s = format + ": " + std::to_string(objects.size()) +
                  (format == "imagefolder" ? " files" : " shards");
  if (kind == DatasetKind::kTokens) return s + ", " + std::to_string(tokens) + " tokens";
  return s + ", " + std::to_string(samples.size()) + " images, " + std::to_string(num_classes) +
         " classes";
}

std::string manifest_to_json(const Dataset& d) {
  nlohmann::json j;
  j["dtune_dataset"] = 1;
  j["format"] = d.format;
  j["kind"] = d.kind == DatasetKind::kImages ? "images" : "tokens";
  j["num_classes"] = d.num_classes;
  j["tokens"] = d.tokens;
  j["vocab"] = d.vocab;
  nlohmann::json objects = nlohmann::json::array();
  for (const auto& o : d.objects) objects.push_back({o.key, o.size_bytes});
  j["objects"] = objects;
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : d.samples) samples.push_back({s.object, s.offset, s.size, s.label});
  j["samples"] = samples;
  return j.dump();
}

Dataset manifest_from_json(const std::string& text, const std::string& what) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.contains("dtune_dataset"))
      throw UsageError(what + ": not a dtune dataset manifest (re-run dtune-data index)");
    Dataset d;
    d.format = j.at("format").get<std::string>();
    d.kind =
        j.at("kind").get<std::string>() == "tokens" ? DatasetKind::kTokens : DatasetKind::kImages;
    d.num_classes = j.at("num_classes").get<int>();
    d.tokens = j.at("tokens").get<int64_t>();
    d.vocab = j.at("vocab").get<int>();
    for (const auto& o : j.at("objects"))
      d.objects.push_back({o.at(0).get<std::string>(), o.at(1).get<int64_t>()});
    for (const auto& s : j.at("samples")) {
      d.samples.push_back({s.at(0).get<uint32_t>(), s.at(1).get<int64_t>(), s.at(2).get<int64_t>(),
                           s.at(3).get<int32_t>()});
    }
    return d;
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(what + ": malformed manifest (" + std::string(e.what()) +
                     "): re-run dtune-data index");
  }
}

Dataset index_dataset(Storage& s) {
  const std::vector<ObjectInfo> all = s.list();
  Dataset d;
  for (const auto& o : all)
    if (ends_with(o.key, ".tar")) d.objects.push_back(o);
  if (!d.objects.empty()) {
    d.format = "webdataset";
    index_webdataset(s, d);
    return d;
  }
  for (const auto& o : all)
    if (ends_with(o.key, ".bin")) d.objects.push_back(o);
  if (!d.objects.empty()) {
    d.format = "tokens";
    d.kind = DatasetKind::kTokens;
    for (const auto& o : d.objects)
      d.tokens +=
          token_shard_count(s.read(o.key, 0, kTokenHeaderBytes), s.describe() + "/" + o.key);
    return d;
  }
  // ImageFolder: <class>/<...>/<image>.jpg; classes are the first path components, sorted.
  std::set<std::string> classes;
  for (const auto& o : all) {
    const size_t slash = o.key.find('/');
    if (slash != std::string::npos && is_image_name(o.key)) classes.insert(o.key.substr(0, slash));
  }
  if (classes.empty())
    throw UsageError(
        "no dataset at " + s.describe() +
        ": expected dataset.json, WebDataset *.tar shards, "
        "*.bin token shards or class folders of JPEG images (make one with dtune-data make)");
  std::map<std::string, int> label;
  for (const auto& c : classes) label.emplace(c, static_cast<int>(label.size()));
  d.format = "imagefolder";
  for (const auto& o : all) {
    const size_t slash = o.key.find('/');
    if (slash == std::string::npos || !is_image_name(o.key) || o.size_bytes <= 0)
      continue;  // empty: no image
    d.samples.push_back({static_cast<uint32_t>(d.objects.size()), 0, o.size_bytes,
                         label.at(o.key.substr(0, slash))});
    d.objects.push_back(o);
  }
  d.num_classes = static_cast<int>(classes.size());
  return d;
}

Dataset open_dataset(Storage& s, bool* indexed) {
  Dataset d;
  try {
    d = manifest_from_json(s.read(kManifestKey), s.describe() + "/" + kManifestKey);
    if (indexed) *indexed = false;
  } catch (const NotFound&) {
    if (indexed) *indexed = true;
    d = index_dataset(s);
    validate_dataset(s, d, "the index of " + s.describe());
    return d;
  }
  for (auto& o : d.objects) {
    try {
      s.size(o.key);
    } catch (const NotFound&) {
      throw UsageError(s.describe() + ": " + o.key +
                       " is in dataset.json but does not exist (re-run dtune-data "
                       "index, or restore it)");
    }
  }
  validate_dataset(s, d, s.describe() + "/" + kManifestKey);
  return d;
}

void validate_dataset(Storage& s, const Dataset& d, const std::string& source) {
  const std::string fix = "; fix that record, or re-run dtune-data index";
  if (d.kind == DatasetKind::kTokens) {
    validate_token_shards(s, d, source);
    return;
  }
  if (!d.samples.empty() && d.num_classes < 1)
    throw UsageError(source + ": num_classes " + std::to_string(d.num_classes) +
                     " must be at least 1" + fix);
  for (size_t i = 0; i < d.samples.size(); ++i) {
    const SampleRef& r = d.samples[i];
    const std::string at = source + ": sample " + std::to_string(i);
    if (r.object >= d.objects.size())
      throw UsageError(at + ": object " + std::to_string(r.object) + " is not in its " +
                       std::to_string(d.objects.size()) + " objects" + fix);
    const ObjectInfo& o = d.objects[r.object];
    const std::string in = at + " (in " + o.key + "): ";
    if (r.offset < 0)
      throw UsageError(in + "offset " + std::to_string(r.offset) + " is negative" + fix);
    if (r.size <= 0)
      throw UsageError(in + "size " + std::to_string(r.size) + " must be positive" + fix);
    if (r.offset > o.size_bytes - r.size)  // offset + size > object size, without overflow
      throw UsageError(in + "offset " + std::to_string(r.offset) + " + size " +
                       std::to_string(r.size) + " runs past the end of " + o.key + " (" +
                       std::to_string(o.size_bytes) + " bytes)" + fix);
    if (r.label < 0 || r.label >= d.num_classes)
      throw UsageError(in + "label " + std::to_string(r.label) + " is outside 0.." +
                       std::to_string(d.num_classes - 1) + " (num_classes " +
                       std::to_string(d.num_classes) + ")" + fix);
  }
}

std::vector<SampleRef> token_windows(const Dataset& d, int context) {
  std::vector<SampleRef> out;
  const int64_t T = context;
  for (uint32_t o = 0; o < d.objects.size(); ++o) {
    const int64_t n = (d.objects[o].size_bytes - kTokenHeaderBytes) / 2;
    for (int64_t start = 0; start + T + 1 <= n; start += T)
      out.push_back({o, kTokenHeaderBytes + start * 2, (T + 1) * 2, 0});
  }
  return out;
}

}  // namespace dtune::data
