// MLPerf logging lines in the mlperf-logging package's exact bytes: Python's json.dumps and
// repr(float) rewritten here, since nlohmann's dump differs (no spaces after separators, sorted
// keys, 1e+15 where Python writes 1000000000000000.0, null for NaN).
#include "train/telemetry/mllog.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <system_error>

namespace dtune::train {
namespace {

// CPython's float_repr_style "short" (Python/pystrtod.c, format_float_short with mode 'r'): the
// shortest digits that round-trip, exponent notation when the decimal point position decpt is
// <= -4 or > 16 (that is, exponent < -4 or >= 16).
std::string repr_finite(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  if (r.ec != std::errc()) throw std::runtime_error("python_float_repr: to_chars failed");
  const std::string s(buf, r.ptr);  // "-1.2345e+08": shortest round-trip digits
  const size_t e_at = s.find('e');
  std::string mant = s.substr(0, e_at);
  const int exp10 = std::stoi(s.substr(e_at + 1));
  std::string sign;
  if (!mant.empty() && mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  const int n = static_cast<int>(digits.size());
  const int decpt = exp10 + 1;  // value = 0.DIGITS x 10^decpt
  if (decpt <= -4 || decpt > 16) {
    std::string out = sign + digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    return out + e;
  }
  if (decpt <= 0) return sign + "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  if (decpt >= n) return sign + digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
  return sign + digits.substr(0, static_cast<size_t>(decpt)) + "." +
         digits.substr(static_cast<size_t>(decpt));
}

void append_u4(std::string& out, unsigned cp) {
  char b[16];
  std::snprintf(b, sizeof b, "\\u%04x", cp);
  out += b;
}

// json.dumps's ensure_ascii encoding (json/encoder.py, py_encode_basestring_ascii), from UTF-8; a
// byte that is not valid UTF-8 is taken as Latin-1.
std::string python_string(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    unsigned cp = c;
    size_t len = 1;
    if (c >= 0x80) {
      const size_t need = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
      bool ok = need > 0 && i + need <= s.size();
      unsigned v = need == 4 ? c & 0x07u : need == 3 ? c & 0x0Fu : c & 0x1Fu;
      for (size_t k = 1; ok && k < need; ++k) {
        const auto d = static_cast<unsigned char>(s[i + k]);
        ok = (d & 0xC0) == 0x80;
        v = (v << 6) | (d & 0x3Fu);
      }
      if (ok) {
        cp = v;
        len = need;
      }
    }
    i += len;
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (cp >= 0x20 && cp < 0x7F) {
          out += static_cast<char>(cp);
        } else if (cp > 0xFFFF) {
          const unsigned u = cp - 0x10000;
          append_u4(out, 0xD800 | (u >> 10));
          append_u4(out, 0xDC00 | (u & 0x3FF));
        } else {
          append_u4(out, cp);
        }
    }
  }
  return out + "\"";
}

// The repository-relative path of a source file, as MLLogger(root_dir=<checkout>) reports it.
std::string relative_source(std::string_view file) {
  constexpr std::string_view kSelf = "train/telemetry/mllog.cc";
  const std::string_view self = __FILE__;
  if (self.size() >= kSelf.size() && self.substr(self.size() - kSelf.size()) == kSelf) {
    const std::string_view root = self.substr(0, self.size() - kSelf.size());
    if (!root.empty() && file.substr(0, root.size()) == root) file.remove_prefix(root.size());
  }
  return std::string(file);
}

}  // namespace

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return repr_finite(v);
}

std::string python_json_dumps(const MllogJson& v) {
  using T = MllogJson::value_t;
  switch (v.type()) {
    case T::null:
      return "null";
    case T::boolean:
      return v.get<bool>() ? "true" : "false";
    case T::number_integer:
      return std::to_string(v.get<int64_t>());
    case T::number_unsigned:
      return std::to_string(v.get<uint64_t>());
    case T::number_float:
      return python_float_repr(v.get<double>());
    case T::string:
      return python_string(v.get_ref<const std::string&>());
    case T::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + python_json_dumps(v[i]);
      return out + "]";
    }
    case T::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        out += (first ? "" : ", ") + python_string(k) + ": " + python_json_dumps(x);
        first = false;
      }
      return out + "}";
    }
    default:
      throw std::invalid_argument(
          "python_json_dumps: binary and discarded values have no JSON form");
  }
}

std::string mllog_line(int64_t time_ms, std::string_view event_type, std::string_view key,
                       const MllogJson& value, const MllogJson& metadata, std::string_view file,
                       int64_t lineno) {
  // MLLogger._log_helper: {"file", "lineno"} of the call site, then dict.update with the caller's
  // metadata (a key already there keeps its place and takes the new value).
  MllogJson meta = MllogJson::object();
  meta["file"] = std::string(file);
  meta["lineno"] = lineno;
  if (metadata.is_object())
    for (const auto& [k, x] : metadata.items()) meta[k] = x;
  MllogJson line = MllogJson::object();
  line["namespace"] = "";
  line["time_ms"] = time_ms;
  line["event_type"] = std::string(event_type);
  line["key"] = std::string(key);
  line["value"] = value;
  line["metadata"] = meta;
  return ":::MLLOG " + python_json_dumps(line);
}

void Mllog::log(std::string_view event_type, std::string_view key, const MllogJson& value,
                const MllogJson& metadata, const std::source_location& at) const {
  if (!enabled_) return;
  // mllog.py's _current_time_ms: int(time.time() * 1e3).
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  const std::string line =
      mllog_line(static_cast<int64_t>(ms), event_type, key, value, metadata,
                 relative_source(at.file_name()), static_cast<int64_t>(at.line()));
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace dtune::train
