// Command-line helpers shared by every binary: size parsing with K/M/G suffixes (2^10/2^20/2^30,
// as nccl-tests), size formatting, and running a CLI11 parser so that a bad value exits 2 with one
// line naming the flag.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace dtune {

// Numeric checks whose messages say what to write instead (CLI11's own print a 309-digit range
// and let "nan" through, which then means an instant timeout). NaN and infinities are refused.
extern const CLI::Validator kPositive;     // a finite number > 0
extern const CLI::Validator kNonNegative;  // a finite number >= 0
// A whole number from lo to hi (both included).
CLI::Validator integer_in(long long lo, long long hi);

// The one bound on every thread-count flag of every binary (--threads, --workers, --load-threads):
// 4 x this machine's online cores, at least 64 (so that a small machine can still oversubscribe
// on purpose), at most 1024. Past it a typo (--threads 100000) made 22,585 threads and 5.4 GB,
// and a process that creating threads kept from ever reaching its SIGTERM check.
int max_threads_per_process();
// A whole number from 0 (the binary's default) to max_threads_per_process(); its message names
// the bound and why.
CLI::Validator thread_count();

// "8", "64K", "64KB", "64KiB", "1M", "2G" (case-insensitive suffix). Throws UsageError naming
// `flag` for anything else, for zero when `allow_zero` is false, and for sizes above 2^50.
uint64_t parse_size(const std::string& text, const std::string& flag, bool allow_zero = false);
// 65536 -> "64K" when exact, else bytes: the inverse of parse_size for printing.
std::string format_size(uint64_t bytes);

// Parses argv into `app`. --help / --version print and return the exit code 0; a parse error
// throws UsageError("<message> (see --help)"), which run_main prints once (exit 2). Returns -1 when
// the program should go on. `print` is false on non-root ranks so help is printed once.
int parse_cli(CLI::App& app, int argc, char** argv, bool print);

// The command line as one string, each argument shell-quoted when it needs it.
std::string join_command_line(int argc, char** argv);

}  // namespace dtune
