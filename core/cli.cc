// Size parsing and CLI11 glue.
#include "core/cli.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/error.h"

namespace dtune {

namespace {

// The number in `text`, or nullopt-like NaN with `ok` false when it is not one number.
bool parse_number(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

std::string check_number(const std::string& text, bool allow_zero) {
  double v = 0;
  if (!parse_number(text, v)) return "'" + text + "' is not a number";
  if (!std::isfinite(v)) return "'" + text + "' is not a finite number: give a plain number";
  if (allow_zero ? v < 0 : v <= 0)
    return "'" + text + "' must be " + (allow_zero ? "zero or more" : "greater than zero");
  return "";
}

}  // namespace

const CLI::Validator kPositive(
    [](std::string& text) { return check_number(text, /*allow_zero=*/false); }, "POSITIVE");
const CLI::Validator kNonNegative(
    [](std::string& text) { return check_number(text, /*allow_zero=*/true); }, "NON-NEGATIVE");

CLI::Validator integer_in(long long lo, long long hi) {
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || end != text.c_str() + text.size())
          return "'" + text + "' is not a whole number: give one from " + range;
        if (errno == ERANGE || v < lo || v > hi)
          return "'" + text + "' is out of range: give " + range;
        return "";
      },
      range);
}

int max_threads_per_process() {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<int>(std::clamp(4 * std::max(cores, 1L), 64L, 1024L));
}

CLI::Validator thread_count() {
  const int hi = max_threads_per_process();
  const std::string range = "0 to " + std::to_string(hi);
  return CLI::Validator(
      [hi, range](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || end != text.c_str() + text.size())
          return "'" + text + "' is not a whole number: give a thread count from " + range;
        if (errno == ERANGE || v < 0 || v > hi)
          return "'" + text + "' threads is out of range: give " + range +
                 " (at most 4 x the online cores, at least 64, at most 1024)";
        return "";
      },
      range);
}

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
  if (suffix.empty() || suffix == "B")
    shift = 0;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB")
    shift = 10;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB")
    shift = 20;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB")
    shift = 30;
  else
    return fail("unknown suffix '" + text.substr(pos) + "'");
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
  } catch (const CLI::ConversionError& e) {
    // The checks passed but the option's type cannot hold it (e.g. -n 99999999999 into an int).
    throw UsageError(std::string(e.what()) +
                     ": too large or not a number of the right kind (see --help)");
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
      if (!(std::isalnum(static_cast<unsigned char>(c)) ||
            std::string("-_./=:,+@%").find(c) != std::string::npos))
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
