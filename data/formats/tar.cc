// ustar reading and writing (see tar.h). Header layout (POSIX.1-1988, 512 bytes): name 0..99,
// mode 100, uid 108, gid 116, size 124 (12 octal digits), mtime 136, chksum 148 (8), typeflag
// 156, linkname 157, magic 257 ("ustar"), version 263, uname 265, gname 297, devmajor 329,
// devminor 337, prefix 345 (155). The checksum is the byte sum of the header with the checksum
// field read as spaces.
#include "data/formats/tar.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace dtune::data {
namespace {

constexpr size_t kBlock = 512;

int64_t octal(const char* p, size_t n) {
  int64_t v = 0;
  size_t i = 0;
  while (i < n && (p[i] == ' ' || p[i] == '\0')) ++i;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) v = v * 8 + (p[i] - '0');
  return v;
}

std::string field(const char* p, size_t n) { return std::string(p, strnlen(p, n)); }

bool checksum_ok(const unsigned char* h) {
  int64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : h[i];
  return sum == octal(reinterpret_cast<const char*>(h) + 148, 8);
}

bool all_zero(const unsigned char* h) {
  for (size_t i = 0; i < kBlock; ++i)
    if (h[i]) return false;
  return true;
}

}  // namespace

std::vector<TarMember> scan_tar(const std::string& bytes, bool* truncated) {
  std::vector<TarMember> out;
  if (truncated) *truncated = false;
  auto stop = [&] {
    if (truncated) *truncated = true;
    return out;
  };
  std::string long_name;
  size_t pos = 0;
  while (true) {
    if (pos + kBlock > bytes.size())
      return bytes.size() == pos ? out : stop();  // no end blocks: fine if aligned
    const auto* h = reinterpret_cast<const unsigned char*>(bytes.data() + pos);
    if (all_zero(h)) return out;
    if (!checksum_ok(h)) return stop();
    const char* c = reinterpret_cast<const char*>(h);
    const int64_t size = octal(c + 124, 12);
    const char type = c[156];
    const size_t data = pos + kBlock;
    if (size < 0 || data + static_cast<size_t>(size) > bytes.size()) return stop();
    std::string name = field(c, 100);
    if (std::memcmp(c + 257, "ustar", 5) == 0) {
      const std::string prefix = field(c + 345, 155);
      if (!prefix.empty()) name = prefix + "/" + name;
    }
    if (type == 'L') {  // GNU long name: the next header's name
      long_name = field(bytes.data() + data, static_cast<size_t>(size));
    } else {
      if (!long_name.empty()) name = std::exchange(long_name, {});
      if (type == '0' || type == '\0') out.push_back({name, static_cast<int64_t>(data), size});
    }
    pos = data + (static_cast<size_t>(size) + kBlock - 1) / kBlock * kBlock;
  }
}

std::vector<WdsSample> group_webdataset(const std::vector<TarMember>& members) {
  std::vector<WdsSample> out;
  std::map<std::string, size_t> index;
  for (const auto& m : members) {
    const size_t slash = m.name.rfind('/');
    const size_t base = slash == std::string::npos ? 0 : slash + 1;
    const size_t dot = m.name.find('.', base);
    if (dot == std::string::npos || base == dot) continue;  // no extension: not a field
    const std::string key = m.name.substr(0, dot);
    std::string ext = m.name.substr(dot + 1);
    for (auto& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    auto [it, fresh] = index.emplace(key, out.size());
    if (fresh) out.push_back({key, {}});
    out[it->second].fields[ext] = m;
  }
  return out;
}

void TarWriter::add(const std::string& name, const std::string& data) {
  DTUNE_CHECK(!name.empty() && name.size() < 100, "tar member name must be 1..99 bytes: " + name);
  char h[kBlock] = {};
  std::memcpy(h, name.data(), name.size());
  std::snprintf(h + 100, 8, "%07o", 0644);
  std::snprintf(h + 108, 8, "%07o", 0);
  std::snprintf(h + 116, 8, "%07o", 0);
  std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(data.size()));
  std::snprintf(h + 136, 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(h + 257, "ustar", 6);  // with its NUL
  std::memcpy(h + 263, "00", 2);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < kBlock; ++i) sum += static_cast<unsigned char>(h[i]);
  std::snprintf(h + 148, 8, "%06o", sum);  // six digits, NUL, then the space already there
  h[155] = ' ';
  out_.append(h, kBlock);
  out_.append(data);
  out_.append((kBlock - data.size() % kBlock) % kBlock, '\0');
}

std::string TarWriter::finish() {
  out_.append(2 * kBlock, '\0');
  return std::move(out_);
}

}  // namespace dtune::data
