// Micro-benchmarks: the writers that run inside the step loop. HDF5 row appends (dtune-train's
// step datasets: one row of R ranks per step, core/h5.h) and TensorBoard scalar records.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/h5.h"
#include "train/telemetry/tensorboard.h"

namespace {

std::filesystem::path scratch(const std::string& what) {
  auto p = std::filesystem::temp_directory_path() /
           ("dtune-micro-" + what + "-" + std::to_string(getpid()));
  std::filesystem::create_directories(p);
  return p;
}

void BM_H5AppendRow(benchmark::State& state) {
  const auto dir = scratch("h5");
  const hsize_t ranks = static_cast<hsize_t>(state.range(0));
  {
    dtune::h5::Handle f = dtune::h5::create_file((dir / "rows.h5").string());
    dtune::h5::Handle ds = dtune::h5::create_rows(f.get(), "total_ms", {ranks}, H5T_NATIVE_DOUBLE);
    const std::vector<double> row(ranks, 12.5);
    for (auto _ : state) dtune::h5::append_rows(ds.get(), 1, H5T_NATIVE_DOUBLE, row.data());
  }
  std::filesystem::remove_all(dir);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_H5AppendRow)->Arg(2)->Arg(64);

void BM_TensorBoardScalar(benchmark::State& state) {
  const auto dir = scratch("tb");
  {
    dtune::TensorBoardWriter w(dir.string(), "--tensorboard");
    int64_t step = 0;
    for (auto _ : state) w.scalar("train/loss", step++, 1.25f);
    w.flush();
  }
  std::filesystem::remove_all(dir);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TensorBoardScalar);

}  // namespace
