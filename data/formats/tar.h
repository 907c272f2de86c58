// The tar archives of the WebDataset layout: a shard is a POSIX (ustar) tar whose members are
// grouped into samples by key (the member name up to the first '.' of its basename), one member
// per field: "000123.jpg" and "000123.cls" make sample "000123" with fields jpg and cls. Reading
// works on bytes in memory (a whole shard, as fetched from storage); writing builds one in memory.
// Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtune::data {

struct TarMember {
  std::string name;
  int64_t offset = 0;  // of the member's data in the archive
  int64_t size = 0;
};

// Every regular-file member, in archive order. GNU long names ('L') and the ustar prefix field are
// understood; directories, links and pax headers are skipped. A header with a bad checksum or a
// member running past the end stops the scan: `truncated` says so and the members before it are
// returned (a partly written or damaged shard still yields its complete samples).
std::vector<TarMember> scan_tar(const std::string& bytes, bool* truncated = nullptr);

struct WdsSample {
  std::string key;
  std::map<std::string, TarMember> fields;  // extension ("jpg", "cls", ...) -> member
};
// Members grouped by WebDataset key, in order of first appearance.
std::vector<WdsSample> group_webdataset(const std::vector<TarMember>& members);

class TarWriter {
 public:
  void add(const std::string& name, const std::string& data);  // name < 100 bytes
  // The archive, with the two zero blocks that end it.
  std::string finish();
  size_t size() const { return out_.size(); }

 private:
  std::string out_;
};

}  // namespace dtune::data
