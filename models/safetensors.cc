// The safetensors reader (safetensors.h).
#include "models/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace dtune::models {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the safetensors library's own limit

// The dtypes safetensors names, as LibTorch types, with their element sizes.
struct Dtype {
  const char* name;
  torch::ScalarType type;
  int64_t bytes;
};
constexpr Dtype kDtypes[] = {{"F64", torch::kDouble, 8},
                             {"F32", torch::kFloat, 4},
                             {"F16", torch::kHalf, 2},
                             {"BF16", torch::kBFloat16, 2},
                             {"I64", torch::kLong, 8},
                             {"I32", torch::kInt, 4},
                             {"I16", torch::kShort, 2},
                             {"I8", torch::kChar, 1},
                             {"U8", torch::kByte, 1},
                             {"BOOL", torch::kBool, 1},
                             {"F8_E4M3", torch::kFloat8_e4m3fn, 1},
                             {"F8_E5M2", torch::kFloat8_e5m2, 1}};

const Dtype& dtype_of(const std::string& name, const std::string& where) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d;
  throw UsageError(where + ": dtype '" + name + "' is not one safetensors defines");
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

TensorMap read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("--init-from: cannot read '" + path + "'");
  std::error_code ec;
  const uint64_t file_bytes = fs::file_size(path, ec);
  if (ec) throw UsageError("--init-from: cannot read '" + path + "'");
  unsigned char len_bytes[8];
  if (file_bytes < 8 || !in.read(reinterpret_cast<char*>(len_bytes), 8))
    throw UsageError("'" + path + "' is truncated: shorter than the 8-byte header length");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | len_bytes[i];
  if (header_bytes > kMaxHeaderBytes || header_bytes > file_bytes - 8)
    throw UsageError("'" + path + "': the header claims " + std::to_string(header_bytes) +
                     " bytes, the file has " + std::to_string(file_bytes - 8) +
                     " after the length (truncated or not a safetensors file)");
  std::string text(header_bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_bytes));
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    throw UsageError("'" + path + "': the header is not JSON (" +
                     std::string(e.what()).substr(0, 120) + ")");
  }
  if (!header.is_object()) throw UsageError("'" + path + "': the header is not a JSON object");
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;
  // Every tensor's extent, checked before any is read or allocated: inside the data, the size its
  // dtype and shape need, and no two overlapping (so what is allocated is at most the file).
  struct Entry {
    std::string name;
    torch::ScalarType type;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::map<uint64_t, Entry> entries;  // by begin
  std::vector<Entry> empty;           // zero-size tensors take no bytes
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = "'" + path + "' tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets") || !entry["dtype"].is_string() ||
        !entry["shape"].is_array() || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2)
      throw UsageError(where + ": needs dtype, shape and data_offsets [begin, end]");
    const Dtype& d = dtype_of(entry["dtype"].get<std::string>(), where);
    Entry e{name, d.type, {}, 0, 0};
    uint64_t elements = 1;
    for (const auto& s : entry["shape"]) {
      if (!s.is_number_unsigned()) throw UsageError(where + ": a shape entry is not a size");
      const uint64_t n = s.get<uint64_t>();
      if (n != 0 && elements > (uint64_t{1} << 50) / n)
        throw UsageError(where + ": its shape " + entry["shape"].dump() + " is impossibly large");
      elements *= n;
      e.shape.push_back(static_cast<int64_t>(n));
    }
    const auto& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw UsageError(where + ": data_offsets are not byte offsets");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_bytes)
      throw UsageError(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                       std::to_string(e.end) + "] lie outside the file's " +
                       std::to_string(data_bytes) + " data bytes (truncated?)");
    if (e.end - e.begin != elements * static_cast<uint64_t>(d.bytes))
      throw UsageError(where + ": shape " + entry["shape"].dump() + " of " + d.name + " needs " +
                       std::to_string(elements * d.bytes) + " bytes, data_offsets give " +
                       std::to_string(e.end - e.begin));
    if (e.end == e.begin) {
      empty.push_back(std::move(e));
    } else if (!entries.emplace(e.begin, e).second) {
      throw UsageError(where + ": its data overlaps tensor '" + entries.at(e.begin).name + "'");
    }
  }
  uint64_t last_end = 0;
  std::string last;
  for (const auto& [begin, e] : entries) {
    if (begin < last_end)
      throw UsageError("'" + path + "': tensors '" + last + "' and '" + e.name +
                       "' overlap in the data");
    last_end = e.end;
    last = e.name;
  }
  TensorMap out;
  for (const auto& e : empty)
    out[e.name] = torch::empty(e.shape, torch::TensorOptions().dtype(e.type));
  for (const auto& [begin, e] : entries) {
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(e.type));
    in.seekg(static_cast<std::streamoff>(8 + header_bytes + begin));
    if (!in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - begin)))
      throw UsageError("'" + path + "' tensor '" + e.name + "': cannot read its bytes");
    out[e.name] = t;
  }
  return out;
}

TensorMap read_checkpoint(const std::string& path_in) {
  fs::path path = path_in;
  if (fs::is_directory(path)) {
    if (fs::exists(path / "model.safetensors.index.json"))
      path /= "model.safetensors.index.json";
    else if (fs::exists(path / "model.safetensors"))
      path /= "model.safetensors";
    else
      throw UsageError("--init-from " + path_in +
                       ": the directory has neither model.safetensors nor "
                       "model.safetensors.index.json");
  }
  const std::string p = path.string();
  if (ends_with(p, ".pt") || ends_with(p, ".pth")) return read_tensors(p);
  if (!ends_with(p, ".json")) return read_safetensors(p);
  std::ifstream in(p);
  if (!in) throw UsageError("--init-from: cannot read '" + p + "'");
  json index;
  try {
    index = json::parse(in);
  } catch (const json::exception& e) {
    throw UsageError("'" + p + "': not JSON (" + std::string(e.what()).substr(0, 120) + ")");
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw UsageError("'" + p + "': no \"weight_map\" object (a sharded checkpoint's index)");
  std::map<std::string, std::set<std::string>> by_file;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw UsageError("'" + p + "': weight_map['" + name + "'] is no file");
    by_file[file.get<std::string>()].insert(name);
  }
  TensorMap out;
  for (const auto& [file, names] : by_file) {
    if (fs::path(file).has_parent_path() || file == ".." || file == ".")
      throw UsageError("'" + p + "': shard '" + file + "' is not a file beside the index");
    TensorMap shard = read_safetensors((path.parent_path() / file).string());
    for (const auto& n : names) {
      auto it = shard.find(n);
      if (it == shard.end())
        throw UsageError("'" + p + "' maps tensor '" + n + "' to '" + file +
                         "', which does not hold it");
      out[n] = it->second;
    }
  }
  return out;
}

}  // namespace dtune::models
