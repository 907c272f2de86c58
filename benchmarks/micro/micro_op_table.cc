// Micro-benchmark: the op-table builder (train/telemetry/op_table.h) over a profile window shaped
// like a ResNet training step's as Kineto hands it over: per layer, on the forward thread, a nest
// of 4 CPU ops (aten::conv2d > aten::convolution > aten::_convolution > aten::cudnn_convolution)
// and aten::batch_norm > aten::cudnn_batch_norm, then aten::relu_; on the autograd thread its
// backward (ConvolutionBackward0 > aten::convolution_backward, CudnnBatchNormBackward0); each
// leaf launches one device kernel. 15 events per layer; a ResNet-50 step has about 160 such layers,
// so 2,400 events per profiled step; Arg: the events in the window (ResNet-50, 4 and 40 steps).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "train/telemetry/op_table.h"

namespace {

using dtune::train::ProfiledEvent;

constexpr int64_t kEventsPerLayer = 15;  // 10 CPU ops, 5 kernels

struct Window {
  std::vector<ProfiledEvent> events;
  uint64_t next_id = 1;
  int64_t device_ns = 0;

  // A CPU op [start, end) on `thread`; with `kernel`, a device kernel it launched.
  void op(const std::string& name, uint64_t thread, int64_t start, int64_t end,
          const char* kernel = nullptr) {
    const uint64_t id = next_id++;
    events.push_back({name, thread, start, end, false, id, 0});
    if (kernel) {
      device_ns = std::max(device_ns, start) + (end - start) * 3;
      events.push_back({kernel, 0, device_ns - (end - start) * 3, device_ns, true, 0, id});
    }
  }
};

std::vector<ProfiledEvent> window(int64_t n_events) {
  Window w;
  int64_t t = 0;
  const uint64_t fwd = 1, bwd = 2;
  for (int64_t layer = 0; layer < n_events / kEventsPerLayer; ++layer) {
    // Forward: conv nest (4 ops, 1 kernel), batch norm (2 ops, 1 kernel), relu (1 op, 1 kernel).
    w.op("aten::conv2d", fwd, t, t + 400);
    w.op("aten::convolution", fwd, t + 10, t + 390);
    w.op("aten::_convolution", fwd, t + 20, t + 380);
    w.op("aten::cudnn_convolution", fwd, t + 30, t + 370, "sm90_xmma_fprop_implicit_gemm");
    w.op("aten::batch_norm", fwd, t + 410, t + 600);
    w.op("aten::cudnn_batch_norm", fwd, t + 420, t + 590, "bn_fw_tr_1C11_kernel_NCHW");
    w.op("aten::relu_", fwd, t + 610, t + 660, "vectorized_elementwise_kernel");
    // Backward on the autograd thread: conv (2 ops, 1 kernel), batch norm (1 op, 1 kernel).
    w.op("ConvolutionBackward0", bwd, t + 700, t + 1300);
    w.op("aten::convolution_backward", bwd, t + 710, t + 1290, "sm90_xmma_dgrad_implicit_gemm");
    w.op("CudnnBatchNormBackward0", bwd, t + 1310, t + 1500, "bn_bw_1C11_kernel_new");
    t += 1600;
  }
  return w.events;
}

void BM_OpTableBuild(benchmark::State& state) {
  const std::vector<ProfiledEvent> events = window(state.range(0));
  for (auto _ : state) {
    auto rows = dtune::train::build_op_table(events, dtune::train::OpSort::kSelfDevice);
    benchmark::DoNotOptimize(rows);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(events.size()));
  state.counters["events"] = static_cast<double>(events.size());
}
BENCHMARK(BM_OpTableBuild)->Arg(4 * 2400)->Arg(40 * 2400)->Unit(benchmark::kMillisecond);

}  // namespace
