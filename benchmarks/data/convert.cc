// Converting your own images and text (see convert.h).
#include "benchmarks/data/convert.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "benchmarks/data/make_dataset.h"
#include "core/error.h"
#include "core/timer.h"
#include "data/formats/dataset.h"
#include "data/formats/tar.h"
#include "data/image/jpeg.h"
#include "data/image/png.h"

namespace dtune::data {
namespace {

std::string lower_extension(const std::string& key) {
  const size_t slash = key.rfind('/'), dot = key.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = key.substr(dot);
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

bool is_hidden(const std::string& key) {
  return key.starts_with('.') || key.find("/.") != std::string::npos;
}

bool is_jpeg(const std::string& b) {
  return b.size() >= 3 && static_cast<unsigned char>(b[0]) == 0xFF &&
         static_cast<unsigned char>(b[1]) == 0xD8 && static_cast<unsigned char>(b[2]) == 0xFF;
}

// Image formats we recognise by name but cannot decode (libjpeg-turbo and libpng only).
bool is_other_image_extension(const std::string& ext) {
  static const std::set<std::string> kOther = {".bmp",  ".gif",  ".webp", ".tif",
                                               ".tiff", ".heic", ".avif", ".jxl"};
  return kOther.contains(ext);
}

// Where a URL points, for comparing two of them: "s3://bucket/prefix/", or a local directory's
// absolute path with symlinks resolved as far as it exists, ending in '/'.
std::string location_of(const std::string& url) {
  std::string s;
  if (url.rfind("s3://", 0) == 0) {
    s = url;
  } else {
    const std::filesystem::path p(url.rfind("file://", 0) == 0 ? url.substr(7) : url);
    std::error_code ec;
    std::filesystem::path c = std::filesystem::weakly_canonical(std::filesystem::absolute(p), ec);
    if (ec) c = std::filesystem::absolute(p).lexically_normal();
    s = c.generic_string();
  }
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s == "/" ? s : s + "/";
}

// Shards written inside the source would be read back as a class by the next convert.
void refuse_out_inside_src(const std::string& src, const std::string& out, const char* what) {
  const std::string s = location_of(src), o = location_of(out);
  if (o.rfind(s, 0) == 0)
    throw UsageError(std::string(what) + ": --out " + out +
                     (o == s ? " is the source " : " is inside the source ") + src +
                     " (a later convert would read the shards as images): give an --out outside " +
                     src);
}

// An --out that already holds files is written into only with --overwrite.
void refuse_non_empty_out(Storage& out, const std::string& url, bool overwrite, const char* what) {
  if (overwrite) return;
  const std::vector<ObjectInfo> there = out.list();
  if (!there.empty())
    throw UsageError(std::string(what) + ": --out " + url + " already holds " +
                     std::to_string(there.size()) + " file" + (there.size() > 1 ? "s" : "") + " (" +
                     there.front().key + (there.size() > 1 ? ", ..." : "") +
                     "): give --overwrite to write over them, or an --out that is empty or new");
}

void print_summary(const ConvertSummary& s, const std::string& unit) {
  std::printf("# converted %lld %s: %s\n", static_cast<long long>(s.converted), unit.c_str(),
              s.description.c_str());
  if (s.skipped.empty()) {
    std::printf("# skipped 0 files\n");
    return;
  }
  std::map<std::string, int64_t> by_cause;  // the reason up to its first ':' or '('
  for (const auto& k : s.skipped)
    ++by_cause[k.reason.substr(0, std::min(k.reason.find(':'), k.reason.find(" (")))];
  std::string causes;
  for (const auto& [cause, n] : by_cause)
    causes += (causes.empty() ? "" : ", ") + std::to_string(n) + " " + cause;
  std::printf("# skipped %zu files (%s):\n", s.skipped.size(), causes.c_str());
  for (const auto& k : s.skipped) std::printf("#   %s: %s\n", k.path.c_str(), k.reason.c_str());
}

// One source file's JPEG bytes, or the reason it is left out (`jpg` empty). `transcoded` says
// whether it was re-encoded.
std::string image_as_jpeg(JpegCodec& codec, const std::string& key, const std::string& bytes,
                          const ConvertImagesOptions& o, std::string& reason, bool& transcoded) {
  transcoded = false;
  const std::string ext = lower_extension(key);
  if (bytes.empty()) {
    reason = "empty file";
    return "";
  }
  try {
    if (is_jpeg(bytes)) {
      codec.decode(bytes.data(), bytes.size());  // the loader would skip what does not decode
      return bytes;
    }
    if (is_png(bytes.data(), bytes.size())) {
      if (!o.transcode) {
        reason = "PNG, not transcoded (--no-transcode)";
        return "";
      }
      transcoded = true;
      return codec.encode(decode_png(bytes.data(), bytes.size()), o.quality);
    }
  } catch (const BadImage& e) {
    reason = std::string("undecodable: ") + e.what();
    return "";
  }
  if (ext == ".jpg" || ext == ".jpeg" || ext == ".png")
    reason = "undecodable: named " + ext + " but neither a JPEG nor a PNG";
  else if (is_other_image_extension(ext))
    reason = "unsupported image format (" + ext + "; dtune converts JPEG and PNG)";
  else
    reason = "not an image (" + (ext.empty() ? std::string("no extension") : ext) + ")";
  return "";
}

}  // namespace

ConvertSummary convert_images(const ConvertImagesOptions& o) {
  if (o.quality < 1 || o.quality > 100) throw UsageError("convert: --quality must be 1..100");
  if (!(o.shard_mb > 0)) throw UsageError("convert: --shard-mb must be positive");
  std::unique_ptr<Storage> src;
  try {
    src = open_storage(o.src);
  } catch (const UsageError& e) {  // also NotFound
    throw UsageError("convert " + o.src + ": " + e.what());
  }
  refuse_out_inside_src(o.src, o.out, "convert");
  std::unique_ptr<Storage> out = open_storage_for_writing(o.out);
  refuse_non_empty_out(*out, o.out, o.overwrite, "convert");
  const Stopwatch clock;
  ConvertSummary sum;
  std::vector<LeftOut> left_out;  // unreadable folders, symlinks not followed, second links
  const std::vector<ObjectInfo> all = src->list_noting(left_out);
  for (const auto& l : left_out) sum.skipped.push_back({l.key, l.reason});
  // ImageFolder when any (visible) file sits in a folder; else a flat folder, one class.
  std::map<std::string, int> label;
  for (const auto& obj : all)
    if (const size_t slash = obj.key.find('/'); slash != std::string::npos && !is_hidden(obj.key))
      label.emplace(obj.key.substr(0, slash), 0);
  int next = 0;
  for (auto& [name, l] : label) l = next++;  // sorted names, as torchvision numbers classes
  const bool folders = !label.empty();
  // The loader shuffles shards, then samples within a window of a shard: shards that each hold one
  // class would give one-class batches. So samples are shuffled across shards here (--seed).
  std::vector<ObjectInfo> order = all;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(o.seed));

  Dataset d;
  d.format = "webdataset";
  d.num_classes = folders ? static_cast<int>(label.size()) : 1;
  JpegCodec codec;
  TarWriter tar;
  int64_t in_shard = 0, bytes = 0;
  const auto shard_bytes = static_cast<size_t>(o.shard_mb * (1 << 20));
  auto flush_shard = [&] {
    if (in_shard == 0) return;
    const std::string key = numbered("shard", static_cast<int64_t>(d.objects.size()), ".tar");
    const std::string data = tar.finish();
    out->write(key, data);
    d.objects.push_back({key, static_cast<int64_t>(data.size())});
    bytes += static_cast<int64_t>(data.size());
    tar = TarWriter();
    in_shard = 0;
  };
  Progress progress("dtune-data: convert", "files", static_cast<int64_t>(order.size()), o.progress);
  for (size_t i = 0; i < order.size(); ++i) {
    progress.update(static_cast<int64_t>(i), std::to_string(d.objects.size()) + " shards written");
    const std::string& key = order[i].key;
    const size_t slash = key.find('/');
    if (is_hidden(key)) {
      sum.skipped.push_back({key, "hidden file"});
      continue;
    }
    if (folders && slash == std::string::npos) {
      sum.skipped.push_back({key, "not in a class folder (the images are in SRC/<class>/)"});
      continue;
    }
    std::string source;
    try {
      source = src->read(key);
    } catch (const Error& e) {  // unreadable (permissions, I/O), or gone since the listing
      sum.skipped.push_back({key, std::string("unreadable: ") + e.what()});
      continue;
    }
    std::string reason;
    bool transcoded = false;
    const std::string jpg = image_as_jpeg(codec, key, source, o, reason, transcoded);
    if (jpg.empty()) {
      sum.skipped.push_back({key, reason});
      continue;
    }
    if (in_shard > 0 && tar.size() + jpg.size() + 2048 > shard_bytes) flush_shard();
    const int l = folders ? label.at(key.substr(0, slash)) : 0;
    const std::string stem = numbered("sample", sum.converted, "");
    const int64_t offset = static_cast<int64_t>(tar.size()) + 512;  // after this member's header
    tar.add(stem + ".jpg", jpg);
    tar.add(stem + ".cls", std::to_string(l));
    d.samples.push_back(
        {static_cast<uint32_t>(d.objects.size()), offset, static_cast<int64_t>(jpg.size()), l});
    ++in_shard;
    ++sum.converted;
    ++(transcoded ? sum.transcoded : sum.kept);
  }
  flush_shard();
  std::sort(sum.skipped.begin(), sum.skipped.end(),
            [](const Skipped& a, const Skipped& b) { return a.path < b.path; });
  if (sum.converted == 0) {
    print_summary(sum, "images");
    throw UsageError("convert " + o.src + ": no JPEG or PNG image found (" +
                     std::to_string(sum.skipped.size()) +
                     " files skipped, listed above): give an ImageFolder tree SRC/<class>/<image> "
                     "or a folder of images");
  }
  out->write(kManifestKey, manifest_to_json(d));
  std::string classes;  // line i: the folder of label i
  for (const auto& [name, l] : label) classes += name + "\n";
  out->write("classes.txt", folders ? classes : std::string("0\n"));
  std::ostringstream msg;
  msg.precision(3);
  msg << sum.kept << " JPEG kept as they are, " << sum.transcoded
      << " transcoded to JPEG at quality " << o.quality << "; " << d.describe() << ", "
      << bytes / 1e6 << " MB (shards of at most " << o.shard_mb << " MiB), labels "
      << (folders ? "from the class folders (classes.txt)" : "0 (a flat folder: one class)")
      << ", written in " << clock.elapsed_s() << " s to " << out->describe();
  sum.description = msg.str();
  print_summary(sum, "images");
  return sum;
}

ConvertSummary convert_tokens(const ConvertTokensOptions& o) {
  namespace fs = std::filesystem;
  if (o.src.empty()) throw UsageError("convert tokens: give text files or folders of them");
  ConvertSummary sum;
  std::vector<std::string> files;
  for (const auto& s : o.src) {
    std::error_code ec;
    if (fs::is_directory(s, ec)) {
      refuse_out_inside_src(s, o.out, "convert tokens");
      std::vector<LeftOut> left_out;
      for (const auto& obj : open_local_storage(s)->list_noting(left_out))
        files.push_back((fs::path(s) / obj.key).string());
      for (const auto& l : left_out)
        sum.skipped.push_back({(fs::path(s) / l.key).string(), l.reason});
    } else if (fs::is_regular_file(s, ec)) {
      files.push_back(s);
    } else {
      throw UsageError("convert tokens: " + s + " is neither a file nor a directory");
    }
  }
  refuse_non_empty_out(*open_storage_for_writing(o.out), o.out, o.overwrite, "convert tokens");
  // A file named twice (a symlink beside its target, or given twice) is read once.
  std::map<std::pair<dev_t, ino_t>, std::string> seen;
  std::vector<std::string> unique;
  for (const auto& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) == 0) {
      const auto [it, fresh] = seen.emplace(std::make_pair(st.st_dev, st.st_ino), f);
      if (!fresh) {
        sum.skipped.push_back({f, "duplicate: the same file as " + it->second + " (read once)"});
        continue;
      }
    }
    unique.push_back(f);
  }
  files = std::move(unique);
  MakeTokensOptions mt;
  mt.out = o.out;
  mt.shard_tokens = o.shard_tokens;
  Progress progress("dtune-data: convert tokens", "files", static_cast<int64_t>(files.size()),
                    o.progress);
  for (size_t i = 0; i < files.size(); ++i) {
    progress.update(static_cast<int64_t>(i));
    const std::string& f = files[i];
    const std::string name = fs::path(f).filename().string();
    if (name.starts_with('.')) {
      sum.skipped.push_back({f, "hidden file"});
      continue;
    }
    std::ifstream in(f, std::ios::binary);
    std::string head(8192, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    if (!in && !in.eof()) {
      sum.skipped.push_back({f, "unreadable"});
    } else if (head.empty()) {
      sum.skipped.push_back({f, "empty file"});
    } else if (head.find('\0') != std::string::npos) {
      sum.skipped.push_back({f, "binary, not text (a NUL byte in its first 8 KiB)"});
    } else {
      mt.inputs.push_back(f);
      ++sum.converted;
    }
  }
  if (mt.inputs.empty()) {
    print_summary(sum, "text files");
    throw UsageError("convert tokens: no text file among the " + std::to_string(files.size()) +
                     " files given (listed above)");
  }
  sum.kept = sum.converted;
  sum.description = make_tokens(mt);
  print_summary(sum, "text files");
  return sum;
}

}  // namespace dtune::data
