// Results files never clobber one another: the .partial is created exclusively and locked while a
// run writes it, an existing file is kept (the new run takes NAME.1.h5, NAME.2.h5, ...) unless
// --overwrite, and a stale .partial (nobody holds its lock) is kept unless --overwrite.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/results_file.h"

namespace dtune {
namespace {

namespace fs = std::filesystem;

class ResultsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dtune-results-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST(NumberedPath, BeforeTheExtension) {
  EXPECT_EQ(numbered_path("a/b/run.h5", 1), "a/b/run.1.h5");
  EXPECT_EQ(numbered_path("run.h5", 12), "run.12.h5");
  EXPECT_EQ(numbered_path("a/run", 2), "a/run.2");
}

TEST_F(ResultsFileTest, TwoLiveWritersGetTwoFiles) {
  ResultsFile a = ResultsFile::create(at("same.h5"), "t", "--output");
  ResultsFile b = ResultsFile::create(at("same.h5"), "t", "--output");
  EXPECT_EQ(a.path(), at("same.h5"));
  EXPECT_EQ(b.path(), at("same.1.h5"));
  a.new_run("x");
  b.new_run("y");
  b.finish("complete", 0);
  a.finish("complete", 0);
  EXPECT_TRUE(fs::exists(at("same.h5")));
  EXPECT_TRUE(fs::exists(at("same.1.h5")));
  EXPECT_FALSE(fs::exists(at("same.h5.partial")));
}

TEST_F(ResultsFileTest, ExistingFileIsKept) {
  std::ofstream(at("r.h5")) << "earlier results";
  ResultsFile f = ResultsFile::create(at("r.h5"), "t", "--output");
  EXPECT_EQ(f.path(), at("r.1.h5"));
  f.new_run("x");
  f.finish("complete", 0);
  std::ifstream in(at("r.h5"));
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "earlier results");
}

TEST_F(ResultsFileTest, FileThatAppearsMeanwhileIsKept) {
  ResultsFile f = ResultsFile::create(at("r.h5"), "t", "--output");
  f.new_run("x");
  std::ofstream(at("r.h5")) << "someone else";
  f.finish("complete", 0);
  EXPECT_EQ(f.path(), at("r.1.h5"));
  std::ifstream in(at("r.h5"));
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "someone else");
}

TEST_F(ResultsFileTest, OverwriteReplacesAFinishedFile) {
  std::ofstream(at("r.h5")) << "old";
  ResultsFile f = ResultsFile::create(at("r.h5"), "t", "--output", Existing::kOverwrite);
  EXPECT_EQ(f.path(), at("r.h5"));
  f.new_run("x");
  f.finish("complete", 0);
  EXPECT_GT(fs::file_size(at("r.h5")), 100u);  // an HDF5 file now, not "old"
}

TEST_F(ResultsFileTest, OverwriteNeverTakesALiveWritersPartial) {
  ResultsFile live = ResultsFile::create(at("r.h5"), "t", "--output");
  try {
    ResultsFile::create(at("r.h5"), "t", "--output", Existing::kOverwrite);
    ADD_FAILURE() << "a second writer took a live .partial";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("another run is writing"), std::string::npos) << e.what();
  }
}

TEST_F(ResultsFileTest, StalePartialIsKeptUnlessOverwrite) {
  std::ofstream(at("r.h5.partial")) << "a dead run's results";  // no one holds its lock
  {
    ResultsFile f = ResultsFile::create(at("r.h5"), "t", "--output");
    EXPECT_EQ(f.path(), at("r.1.h5"));
  }
  EXPECT_TRUE(fs::exists(at("r.h5.partial")));
  ResultsFile g = ResultsFile::create(at("r.h5"), "t", "--output", Existing::kOverwrite);
  EXPECT_EQ(g.path(), at("r.h5"));
  g.new_run("x");
  g.finish("complete", 0);
  EXPECT_FALSE(fs::exists(at("r.h5.partial")));
  EXPECT_TRUE(fs::exists(at("r.h5")));
}

}  // namespace
}  // namespace dtune
