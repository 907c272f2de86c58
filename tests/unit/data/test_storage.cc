// The local storage backend (exact bytes, ranges, listing order, errors, concurrent reads) and
// open_storage's URL parsing. The S3 backend is tested against a real server in
// tests/data/test_s3_storage.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/storage/storage.h"

namespace dtune::data {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards. The storage's root is one level inside it, so
// that what a key escaping the root would write (its parent's "x") is ours to check, whatever the
// machine's temporary directory already holds.
class LocalStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    outer_ = fs::temp_directory_path() /
             ("dtune_storage_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    root_ = outer_ / "root";
    fs::remove_all(outer_);
    fs::create_directories(root_);
    st_ = open_local_storage(root_.string());
  }
  void TearDown() override { fs::remove_all(outer_); }

  static std::string pattern(size_t n) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 7) % 251);
    return s;
  }

  fs::path outer_, root_;
  std::unique_ptr<Storage> st_;
};

TEST_F(LocalStorageTest, WriteThenReadGivesTheSameBytes) {
  const std::string bytes = pattern(100000) + std::string("\0\n\r", 3);
  st_->write("deep/nested/dir/shard-0.bin", bytes);
  EXPECT_TRUE(fs::is_regular_file(root_ / "deep/nested/dir/shard-0.bin"));
  EXPECT_EQ(st_->read("deep/nested/dir/shard-0.bin"), bytes);
  EXPECT_EQ(st_->size("deep/nested/dir/shard-0.bin"), static_cast<int64_t>(bytes.size()));
  st_->write("deep/nested/dir/shard-0.bin", "replaced");  // atomic replace
  EXPECT_EQ(st_->read("deep/nested/dir/shard-0.bin"), "replaced");
}

TEST_F(LocalStorageTest, RangeAndShortReads) {
  const std::string bytes = pattern(1000);
  st_->write("a.bin", bytes);
  EXPECT_EQ(st_->read("a.bin", 0, 10), bytes.substr(0, 10));
  EXPECT_EQ(st_->read("a.bin", 123, 456), bytes.substr(123, 456));
  EXPECT_EQ(st_->read("a.bin", 990, 100), bytes.substr(990));  // short read at the end
  EXPECT_EQ(st_->read("a.bin", 500), bytes.substr(500));       // to the end
  EXPECT_EQ(st_->read("a.bin", 1000, 5), "");                  // at the end
  EXPECT_EQ(st_->read("a.bin", 5000, 5), "");                  // past the end
  EXPECT_EQ(st_->read("a.bin", 3, 0), "");
  EXPECT_THROW(st_->read("a.bin", -1, 5), UsageError);
  st_->write("empty.bin", "");
  EXPECT_EQ(st_->read("empty.bin"), "");
  EXPECT_EQ(st_->size("empty.bin"), 0);
}

TEST_F(LocalStorageTest, ListIsRecursiveSortedAndRelative) {
  const std::vector<std::pair<std::string, size_t>> files = {{"z.bin", 3},   {"a/b/c.bin", 10},
                                                             {"a/a.bin", 0}, {"B.bin", 1},
                                                             {"a.bin", 7},   {"a b/ü.bin", 2}};
  for (const auto& [key, n] : files) st_->write(key, pattern(n));
  fs::create_directories(root_ / "empty_dir");
  const auto listed = st_->list();
  // Byte order: 'B' < 'a', "a b/" < "a.bin" < "a/" (' ' < '.' < '/').
  const std::vector<std::string> keys = {"B.bin",   "a b/ü.bin", "a.bin",
                                         "a/a.bin", "a/b/c.bin", "z.bin"};
  ASSERT_EQ(listed.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(listed[i].key, keys[i]);
    EXPECT_EQ(listed[i].size_bytes, st_->size(keys[i]));
  }
  EXPECT_EQ(st_->list().size(), keys.size());
}

TEST_F(LocalStorageTest, MissingKeyIsNotFoundNamingThePath) {
  try {
    st_->read("no/such.bin");
    FAIL() << "no exception";
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find((root_ / "no/such.bin").string()), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(st_->size("no/such.bin"), NotFound);
}

TEST_F(LocalStorageTest, KeysCannotEscapeTheRoot) {
  for (const char* key : {"../x", "a/../../x", "..", "/etc/passwd", "", "a//b", "./a"}) {
    EXPECT_THROW(st_->read(key), UsageError) << key;
    EXPECT_THROW(st_->write(key, "x"), UsageError) << key;
  }
  EXPECT_FALSE(fs::exists(root_.parent_path() / "x"));
}

TEST_F(LocalStorageTest, ConcurrentReadsFromEightThreadsGiveIdenticalBytes) {
  const std::string bytes = pattern(1 << 20);
  st_->write("big.bin", bytes);
  constexpr int kThreads = 8;
  constexpr int64_t kChunk = 4096 + 17;  // not a divisor: the last chunk is short
  std::vector<std::string> got(kThreads, std::string(bytes.size(), '\0'));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread reads the whole object in chunks, starting at a different chunk.
      const int64_t n = static_cast<int64_t>(bytes.size());
      const int64_t chunks = (n + kChunk - 1) / kChunk;
      for (int64_t i = 0; i < chunks; ++i) {
        const int64_t c = (i + t * 37) % chunks;
        const std::string part = st_->read("big.bin", c * kChunk, kChunk);
        got[t].replace(static_cast<size_t>(c * kChunk), part.size(), part);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(got[t] == bytes) << "thread " << t;
  const auto s = st_->stats();
  EXPECT_EQ(s.bytes, kThreads * static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(s.retries, 0);
}

TEST(OpenStorage, LocalPathsAndFileUrls) {
  const fs::path dir = fs::temp_directory_path() / ("dtune_open_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "k.txt") << "hello";
  for (const std::string& url :
       {dir.string(), dir.string() + "/", "file://" + dir.string(), "file:" + dir.string()}) {
    const auto st = open_storage(url);
    EXPECT_EQ(st->describe(), "file:" + dir.string()) << url;
    EXPECT_EQ(st->read("k.txt"), "hello") << url;
    EXPECT_EQ(open_storage(st->describe())->read("k.txt"), "hello");  // describe() round-trips
  }
  fs::remove_all(dir);
  EXPECT_THROW(open_storage(dir.string()), NotFound);
  EXPECT_THROW(open_storage("file://" + dir.string()), NotFound);
}

TEST(OpenStorage, MalformedUrlsAreUsageErrors) {
  for (const char* url : {"", "s3://", "s3:///x", "s3://bad bucket/x", "s3://b/../x",
                          "file://relative/dir", "gs://bucket/x", "http://host/x"}) {
    try {
      open_storage(url);
      ADD_FAILURE() << url << ": no exception";
    } catch (const UsageError& e) {
      if (std::string(url).rfind("s3://", 0) == 0) {
        EXPECT_NE(std::string(e.what()).find("expected s3://bucket"), std::string::npos)
            << e.what();
      }
    }
  }
}

// Sets or clears environment variables for one scope and restores them after.
class EnvGuard {
 public:
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~EnvGuard() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) {
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        ::unsetenv(it->first.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(OpenStorage, S3WithoutCredentialsNamesTheVariables) {
  EnvGuard env;
  env.set("AWS_ACCESS_KEY_ID", nullptr);
  env.set("AWS_SECRET_ACCESS_KEY", nullptr);
  env.set("AWS_ENDPOINT_URL", "http://127.0.0.1:1");  // never contacted
  try {
    open_storage("s3://bucket/prefix");
    FAIL() << "no exception";
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("AWS_ACCESS_KEY_ID"), std::string::npos) << msg;
    EXPECT_NE(msg.find("AWS_SECRET_ACCESS_KEY"), std::string::npos) << msg;
  }
  env.set("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE");
  try {
    open_storage("s3://bucket");
    FAIL() << "no exception";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("set AWS_SECRET_ACCESS_KEY"), std::string::npos)
        << e.what();
  }
}

TEST(S3StorageOptions, FromEnvironment) {
  EnvGuard env;
  env.set("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE");
  env.set("AWS_SECRET_ACCESS_KEY", "secret");
  env.set("AWS_SESSION_TOKEN", nullptr);
  env.set("AWS_ENDPOINT_URL", nullptr);
  env.set("AWS_ENDPOINT_URL_S3", nullptr);
  env.set("AWS_REGION", nullptr);
  env.set("AWS_DEFAULT_REGION", "eu-west-3");
  env.set("DTUNE_S3_TIMEOUT_S", nullptr);
  env.set("DTUNE_S3_RETRIES", nullptr);
  S3Options o = S3Options::from_env();
  EXPECT_EQ(o.region, "eu-west-3");
  EXPECT_EQ(o.endpoint, "https://s3.eu-west-3.amazonaws.com");
  EXPECT_EQ(o.timeout_s, 30);
  EXPECT_EQ(o.retries, 4);
  env.set("AWS_REGION", "us-west-2");  // wins over AWS_DEFAULT_REGION
  env.set("AWS_ENDPOINT_URL", "http://minio:9000/");
  env.set("DTUNE_S3_TIMEOUT_S", "2.5");
  env.set("DTUNE_S3_RETRIES", "0");
  o = S3Options::from_env();
  EXPECT_EQ(o.region, "us-west-2");
  EXPECT_EQ(o.endpoint, "http://minio:9000");
  EXPECT_EQ(o.timeout_s, 2.5);
  EXPECT_EQ(o.retries, 0);
  env.set("DTUNE_S3_RETRIES", "many");
  EXPECT_THROW(S3Options::from_env(), UsageError);
  env.set("DTUNE_S3_RETRIES", "1");
  env.set("DTUNE_S3_TIMEOUT_S", "0");
  EXPECT_THROW(S3Options::from_env(), UsageError);
  env.set("DTUNE_S3_TIMEOUT_S", "1");
  env.set("AWS_ENDPOINT_URL", "minio:9000");
  EXPECT_THROW(S3Options::from_env(), UsageError);
}

}  // namespace
}  // namespace dtune::data
