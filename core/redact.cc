// Secret names and URL user-info (see core/redact.h).
#include "core/redact.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace dtune {

bool is_secret_name(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  static constexpr std::array kParts = {"TOKEN", "SECRET",     "PASSWORD", "PASSWD",
                                        "KEY",   "CREDENTIAL", "JWT"};
  return std::any_of(kParts.begin(), kParts.end(),
                     [&](const char* p) { return upper.find(p) != std::string::npos; });
}

std::string strip_url_userinfo(const std::string& text) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t scheme_end = text.find("://", pos);
    if (scheme_end == std::string::npos) break;
    const size_t authority = scheme_end + 3;
    // The authority ends at the first '/', '?', '#' or whitespace; user-info is what precedes its
    // last '@'.
    size_t end = authority;
    while (end < text.size() && text[end] != '/' && text[end] != '?' && text[end] != '#' &&
           !std::isspace(static_cast<unsigned char>(text[end])))
      ++end;
    const size_t at = text.rfind('@', end == authority ? authority : end - 1);
    out.append(text, pos, authority - pos);
    if (at != std::string::npos && at >= authority && at < end) {
      out.append(text, at + 1, end - at - 1);
    } else {
      out.append(text, authority, end - authority);
    }
    pos = end;
  }
  out.append(text, pos, std::string::npos);
  return out;
}

std::string recordable_env_value(const std::string& name, const std::string& value) {
  return is_secret_name(name) ? kRedacted : strip_url_userinfo(value);
}

}  // namespace dtune
