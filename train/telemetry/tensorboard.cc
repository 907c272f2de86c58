// TFRecord + Event protobuf encoding.
#include "train/telemetry/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace dtune {
namespace {

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // reflected 0x1EDC6F41
    t[i] = c;
  }
  return t;
}

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <typename T>
void fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts (x86-64, aarch64)
  out.append(b, sizeof(T));
}

void bytes_field(std::string& out, int field, const std::string& s) {
  varint(out, static_cast<uint64_t>(field) << 3 | 2);
  varint(out, s.size());
  out += s;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = make_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, const std::string& flag) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  path_ = (std::filesystem::path(dir) /
           ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now_s())) + "." + host +
            "." + std::to_string(getpid())))
              .string();
  out_.open(path_, std::ios::binary);
  if (ec || !out_)
    throw UsageError(flag + " '" + dir +
                     "': cannot write event files there; choose a writable directory");
  std::string event;
  varint(event, 1 << 3 | 1);  // wall_time: double
  fixed(event, now_s());
  bytes_field(event, 3, "brain.Event:2");  // file_version
  write_event(event);
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, float value) {
  std::string v;
  bytes_field(v, 1, tag);  // Value.tag
  varint(v, 2 << 3 | 5);   // Value.simple_value: float
  fixed(v, value);
  std::string summary;
  bytes_field(summary, 1, v);  // Summary.value
  std::string event;
  varint(event, 1 << 3 | 1);
  fixed(event, now_s());
  varint(event, 2 << 3 | 0);  // Event.step: int64
  varint(event, static_cast<uint64_t>(step));
  bytes_field(event, 5, summary);  // Event.summary
  write_event(event);
}

void TensorBoardWriter::write_event(const std::string& event) {
  const uint64_t len = event.size();
  std::string rec;
  fixed(rec, len);
  fixed(rec, masked_crc32c(&len, sizeof len));
  rec += event;
  fixed(rec, masked_crc32c(event.data(), event.size()));
  out_.write(rec.data(), static_cast<std::streamsize>(rec.size()));
}

void TensorBoardWriter::flush() { out_.flush(); }

}  // namespace dtune
