// MLPerf logging lines, byte for byte as the mlperf-logging package's MLLogger writes them
// (mlperf_logging/mllog/mllog.py, _encode_log): ":::MLLOG " and json.dumps of the ordered fields
// namespace, time_ms, event_type, key, value, metadata, where metadata starts with the caller's
// {"file", "lineno"} and then the caller's own entries. start()/end()/event() are MLLogger's
// start/end/event: INTERVAL_START, INTERVAL_END and POINT_IN_TIME. Keys are the package's
// mllog/constants.py names, or dtune_-prefixed for what it has no name for.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <source_location>
#include <string>
#include <string_view>

namespace dtune::train {

using MllogJson = nlohmann::ordered_json;  // keeps insertion order, as Python dicts do

// Python's repr(float), which json.dumps writes: shortest round-trip digits, fixed notation for
// decimal exponents -4..15 (with ".0" when integral), else d.ddde±XX; NaN, Infinity, -Infinity.
std::string python_float_repr(double v);
// json.dumps(v) with its defaults: ", " and ": " separators, ensure_ascii (\uXXXX, lowercase hex,
// surrogate pairs), allow_nan.
std::string python_json_dumps(const MllogJson& v);
// One line without the trailing newline; `file` and `lineno` lead the metadata.
std::string mllog_line(int64_t time_ms, std::string_view event_type, std::string_view key,
                       const MllogJson& value, const MllogJson& metadata, std::string_view file,
                       int64_t lineno);

// Prints lines on stdout when enabled (rank 0 with --mllog), each flushed at once.
class Mllog {
 public:
  explicit Mllog(bool enabled) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }
  void start(std::string_view key, const MllogJson& value = nullptr,
             const MllogJson& metadata = nullptr,
             std::source_location at = std::source_location::current()) {
    log("INTERVAL_START", key, value, metadata, at);
  }
  void end(std::string_view key, const MllogJson& value = nullptr,
           const MllogJson& metadata = nullptr,
           std::source_location at = std::source_location::current()) {
    log("INTERVAL_END", key, value, metadata, at);
  }
  void event(std::string_view key, const MllogJson& value = nullptr,
             const MllogJson& metadata = nullptr,
             std::source_location at = std::source_location::current()) {
    log("POINT_IN_TIME", key, value, metadata, at);
  }

 private:
  void log(std::string_view event_type, std::string_view key, const MllogJson& value,
           const MllogJson& metadata, const std::source_location& at) const;
  bool enabled_;
};

}  // namespace dtune::train
