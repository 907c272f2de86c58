// MLPerf-style log lines (:::MLLOG {"key": ..., "value": ..., "time_ms": ..., "metadata": {...}}),
// printed by rank 0 with --mllog, so tools that parse MLPerf training logs read dtune's runs.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <string>

namespace dtune::train {

inline void mllog(const std::string& key, const nlohmann::json& value, const nlohmann::json& metadata = {}) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  nlohmann::json line = {{"namespace", ""}, {"time_ms", ms}, {"event_type", "POINT_IN_TIME"},
                         {"key", key}, {"value", value},
                         {"metadata", metadata.is_null() ? nlohmann::json::object() : metadata}};
  std::printf(":::MLLOG %s\n", line.dump().c_str());
  std::fflush(stdout);
}

}  // namespace dtune::train
