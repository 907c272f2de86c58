// Micro-benchmarks: the writers that run inside the step loop. HDF5 row appends (dtune-train's
// step datasets: one row of R ranks per step, core/h5.h) and TensorBoard scalar records.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/h5.h"
#include "train/telemetry/tensorboard.h"

namespace {

// A fresh directory under $TMPDIR (mkdtemp; std::filesystem is avoided here: LibTorch exports
// its own copies of some std::filesystem functions, and remove_all resolved to one crashes).
std::string scratch(const std::string& what) {
  const char* tmp = std::getenv("TMPDIR");
  std::string t = std::string(tmp && *tmp ? tmp : "/tmp") + "/dtune-micro-" + what + "-XXXXXX";
  if (!mkdtemp(t.data())) throw std::runtime_error("dtune-micro: cannot create " + t);
  return t;
}

void BM_H5AppendRow(benchmark::State& state) {
  const auto dir = scratch("h5");
  const hsize_t ranks = static_cast<hsize_t>(state.range(0));
  {
    dtune::h5::Handle f = dtune::h5::create_file(dir + "/rows.h5");
    dtune::h5::Handle ds = dtune::h5::create_rows(f.get(), "total_ms", {ranks}, H5T_NATIVE_DOUBLE);
    const std::vector<double> row(ranks, 12.5);
    for (auto _ : state) dtune::h5::append_rows(ds.get(), 1, H5T_NATIVE_DOUBLE, row.data());
  }
  std::remove((dir + "/rows.h5").c_str());
  rmdir(dir.c_str());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_H5AppendRow)->Arg(2)->Arg(64);

void BM_TensorBoardScalar(benchmark::State& state) {
  const auto dir = scratch("tb");
  std::string file;
  {
    dtune::TensorBoardWriter w(dir, "--tensorboard");
    int64_t step = 0;
    for (auto _ : state) w.scalar("train/loss", step++, 1.25f);
    w.flush();
    file = w.path();
  }
  std::remove(file.c_str());
  rmdir(dir.c_str());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TensorBoardScalar);

}  // namespace
