// Size parsing and CLI11 glue.
#include "core/cli.h"

#include <cctype>
#include <cstdio>
#include <iostream>

#include "core/error.h"

namespace dtune {

uint64_t parse_size(const std::string& text, const std::string& flag, bool allow_zero) {
  auto fail = [&](const std::string& why) -> uint64_t {
    throw UsageError(flag + " '" + text + "': " + why +
                     " (use a byte count with an optional K, M or G suffix, e.g. 8, 64K, 1M)");
  };
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0) return fail("not a size");
  if (pos > 15) return fail("too large");
  uint64_t value = std::stoull(text.substr(0, pos));
  std::string suffix = text.substr(pos);
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (suffix.empty() || suffix == "B") shift = 0;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB") shift = 10;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB") shift = 20;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB") shift = 30;
  else return fail("unknown suffix '" + text.substr(pos) + "'");
  if (value > (uint64_t{1} << (50 - shift))) return fail("too large (limit 1P)");
  value <<= shift;
  if (value == 0 && !allow_zero) return fail("must be greater than zero");
  return value;
}

std::string format_size(uint64_t bytes) {
  static const char* kSuffix[] = {"", "K", "M", "G"};
  int i = 0;
  while (i < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++i;
  }
  return std::to_string(bytes) + kSuffix[i];
}

int parse_cli(CLI::App& app, int argc, char** argv, bool print) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    if (print) std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp& e) {
    if (print) std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    if (print) std::cout << e.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    // Thrown, not printed here: run_main decides whether every rank saw it (print once, exit 2)
    // or only some did (abort the job, so no rank waits for this one).
    throw UsageError(std::string(e.what()) + " (see --help)");
  }
  return -1;
}

std::string join_command_line(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    bool plain = !a.empty();
    for (char c : a)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || std::string("-_./=:,+@%").find(c) != std::string::npos))
        plain = false;
    if (i) out += ' ';
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

}  // namespace dtune
