// dtune_storage_tool: a small CLI over data/storage for tests/data/test_s3_storage.py, so the
// pytest drives the real C++ client against a real S3 server (moto). Not installed.
//   dtune_storage_tool [--stats] ls URL                    size<TAB>key per line
//   dtune_storage_tool [--stats] get URL KEY [OFFSET [LENGTH]]   the bytes, to stdout
//   dtune_storage_tool [--stats] pget URL KEY THREADS CHUNK   the bytes, read in CHUNK-byte ranges
//                                                         by THREADS threads sharing one Storage
//   dtune_storage_tool [--stats] put URL KEY FILE          FILE "-" reads stdin
//   dtune_storage_tool [--stats] size URL KEY
//   dtune_storage_tool [--stats] describe URL
// --stats prints "stats requests=N bytes=N retries=N" to stderr after the command. Errors: one
// line "dtune_storage_tool: error: ..." on stderr; exit 2 for UsageError/NotFound, 3 for a
// TimeoutError (as core/main_guard.h), 1 otherwise.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/storage/storage.h"

namespace {

using dtune::UsageError;
using dtune::data::Storage;

constexpr const char* kUsage =
    "usage: dtune_storage_tool [--stats] {ls URL | get URL KEY [OFFSET [LENGTH]] | "
    "pget URL KEY THREADS CHUNK | put URL KEY FILE | size URL KEY | describe URL}";

int64_t parse_int(const std::string& what, const std::string& s) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) throw UsageError(what + " '" + s + "' is not an integer");
  return v;
}

std::string read_input(const std::string& file) {
  if (file == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UsageError("cannot open input file '" + file + "'");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The loader's access pattern: many threads issuing range reads of one Storage at once. Chunks
// are handed out through an atomic counter; the first exception is rethrown after the join.
std::string parallel_get(Storage& st, const std::string& key, int threads, int64_t chunk) {
  const int64_t size = st.size(key);
  const int64_t chunks = (size + chunk - 1) / chunk;
  std::string out(static_cast<size_t>(size), '\0');
  std::atomic<int64_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      try {
        for (int64_t c = next++; c < chunks; c = next++) {
          const std::string part = st.read(key, c * chunk, chunk);
          if (part.size() != static_cast<size_t>(std::min(chunk, size - c * chunk)))
            throw dtune::Error("chunk " + std::to_string(c) + " of " + key + " came back short");
          std::copy(part.begin(), part.end(), out.begin() + c * chunk);  // disjoint ranges
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  return out;
}

void need(const std::vector<std::string>& a, size_t lo, size_t hi) {
  if (a.size() < lo || a.size() > hi) throw UsageError(kUsage);
}

int run(std::vector<std::string> args) {
  bool stats = false;
  if (!args.empty() && args[0] == "--stats") {
    stats = true;
    args.erase(args.begin());
  }
  if (args.empty()) throw UsageError(kUsage);
  const std::string cmd = args[0];
  std::unique_ptr<Storage> st;
  if (cmd == "ls") {
    need(args, 2, 2);
    st = dtune::data::open_storage(args[1]);
    for (const auto& o : st->list()) std::cout << o.size_bytes << '\t' << o.key << '\n';
  } else if (cmd == "get") {
    need(args, 3, 5);
    const int64_t offset = args.size() > 3 ? parse_int("OFFSET", args[3]) : 0;
    const int64_t length = args.size() > 4 ? parse_int("LENGTH", args[4]) : -1;
    st = dtune::data::open_storage(args[1]);
    const std::string bytes = st->read(args[2], offset, length);
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  } else if (cmd == "pget") {
    need(args, 5, 5);
    const int64_t threads = parse_int("THREADS", args[3]), chunk = parse_int("CHUNK", args[4]);
    if (threads < 1 || chunk < 1) throw UsageError("THREADS and CHUNK must be positive");
    st = dtune::data::open_storage(args[1]);
    std::cout << parallel_get(*st, args[2], static_cast<int>(threads), chunk);
  } else if (cmd == "put") {
    need(args, 4, 4);
    const std::string bytes = read_input(args[3]);
    st = dtune::data::open_storage(args[1]);
    st->write(args[2], bytes);
  } else if (cmd == "size") {
    need(args, 3, 3);
    st = dtune::data::open_storage(args[1]);
    std::cout << st->size(args[2]) << '\n';
  } else if (cmd == "describe") {
    need(args, 2, 2);
    st = dtune::data::open_storage(args[1]);
    std::cout << st->describe() << '\n';
  } else {
    throw UsageError("unknown command '" + cmd + "'; " + kUsage);
  }
  std::cout.flush();
  std::fflush(stdout);
  if (stats) {
    const auto s = st->stats();
    std::cerr << "stats requests=" << s.requests << " bytes=" << s.bytes << " retries=" << s.retries
              << std::endl;
  }
  return 0;
}

// One line, whatever the message holds.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const dtune::UsageError& e) {  // also dtune::data::NotFound
    std::cerr << "dtune_storage_tool: error: " << one_line(e.what()) << std::endl;
    return 2;
  } catch (const dtune::TimeoutError& e) {
    std::cerr << "dtune_storage_tool: error: " << one_line(e.what()) << std::endl;
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "dtune_storage_tool: error: " << one_line(e.what()) << std::endl;
    return 1;
  }
}
