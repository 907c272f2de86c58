// MFU's two halves. The peak: each GPU model as cudaGetDeviceProperties names it (with the SM count
// and memory an nvidia-smi shows for it) gets its own datasheet peak, SXM, PCIe and NVL apart, and
// a GPU not in the table gets none (MFU NaN) unless --peak-tflops gives one. The FLOPs: for a GPT,
// the counted forward and llm.c's 6N+6LCT count the same matmuls, and differ by exactly the
// non-matmul parameters; PaLM's 6N+12LCT is what nanoGPT's estimate_mfu computes.
#include <gtest/gtest.h>

#include <cmath>

#include "models/registry.h"
#include "train/mfu.h"

namespace dtune::train {
namespace {

constexpr int64_t kMiB = 1 << 20;

std::string sku_name(const DeviceProperties& gpu) {
  const GpuSku* s = find_gpu_sku(gpu);
  return s ? s->name : "none";
}

struct Case {
  const char* name;
  int sms;
  int64_t memory_mib;  // as nvidia-smi shows it
  const char* sku;
  double fp32, tf32, bf16;
};

TEST(GpuPeaks, EachSkuByNameSmsAndMemory) {
  const Case cases[] = {
      {"NVIDIA A100-SXM4-80GB", 108, 81920, "A100 SXM", 19.5, 156, 312},
      {"NVIDIA A100-SXM4-40GB", 108, 40960, "A100 SXM", 19.5, 156, 312},
      {"NVIDIA A100 80GB PCIe", 108, 81920, "A100 PCIe", 19.5, 156, 312},
      {"NVIDIA A100-PCIE-40GB", 108, 40960, "A100 PCIe", 19.5, 156, 312},
      {"NVIDIA H100 80GB HBM3", 132, 81559, "H100 SXM", 67, 495, 989},
      {"NVIDIA H100 PCIe", 114, 81559, "H100 PCIe", 51, 378, 756},
      {"NVIDIA H100 NVL", 132, 95830, "H100 NVL", 60, 417.5, 835.5},
      {"NVIDIA H200", 132, 143771, "H200 SXM", 67, 495, 989},
      {"NVIDIA H200 NVL", 132, 143771, "H200 NVL", 60, 417.5, 835.5},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const DeviceProperties gpu{c.name, c.sms, c.memory_mib * kMiB};
    const GpuSku* s = find_gpu_sku(gpu);
    ASSERT_NE(s, nullptr);
    EXPECT_STREQ(s->name, c.sku);
    EXPECT_EQ(peak_for(gpu, Precision::kFp32, 0).tflops, c.fp32);
    EXPECT_EQ(peak_for(gpu, Precision::kTf32, 0).tflops, c.tf32);
    EXPECT_EQ(peak_for(gpu, Precision::kBf16, 0).tflops, c.bf16);
    EXPECT_EQ(peak_for(gpu, Precision::kFp16, 0).tflops, c.bf16);
    EXPECT_NE(peak_for(gpu, Precision::kBf16, 0).source.find(c.sku), std::string::npos);
  }
}

TEST(GpuPeaks, SmCountAndMemoryTellAnUnmarkedH100Apart) {
  // The name alone says no form factor: 114 SMs is the PCIe card, 132 SMs with 94 GB the NVL.
  EXPECT_EQ(sku_name({"NVIDIA H100", 114, 81559 * kMiB}), "H100 PCIe");
  EXPECT_EQ(sku_name({"NVIDIA H100", 132, 95830 * kMiB}), "H100 NVL");
  EXPECT_EQ(sku_name({"NVIDIA H100", 132, 81559 * kMiB}), "H100 SXM");
  // Without SM count and memory the name decides: PCIe and NVL cards say so in their names.
  EXPECT_EQ(sku_name({"NVIDIA H100 80GB HBM3", 0, 0}), "H100 SXM");
  EXPECT_EQ(sku_name({"NVIDIA H100 PCIe", 0, 0}), "H100 PCIe");
  EXPECT_EQ(sku_name({"NVIDIA H200 NVL", 0, 0}), "H200 NVL");
}

TEST(GpuPeaks, UnknownGpusGetNoPeakUnlessGiven) {
  const DeviceProperties unknown[] = {
      {"NVIDIA GeForce RTX 4090", 128, 24564 * kMiB},
      {"NVIDIA GH200 480GB", 132, 97871 * kMiB},                // not an H200
      {"NVIDIA H100 80GB HBM3 MIG 3g.40gb", 60, 40192 * kMiB},  // a slice: fewer SMs
      {"NVIDIA H100 PCIe", 132, 81559 * kMiB},                  // name and SM count disagree
      {"NVIDIA H200", 132, 81559 * kMiB},                       // memory of no H200
  };
  for (const auto& gpu : unknown) {
    SCOPED_TRACE(gpu.name);
    EXPECT_EQ(find_gpu_sku(gpu), nullptr);
    const Peak p = peak_for(gpu, Precision::kBf16, 0);
    EXPECT_EQ(p.tflops, 0);
    EXPECT_NE(p.source.find("--peak-tflops"), std::string::npos);
    EXPECT_TRUE(std::isnan(mfu(1e9, 100, 1, p, 1)));
    EXPECT_EQ(peak_for(gpu, Precision::kBf16, 123).tflops, 123);  // --peak-tflops
  }
  const Peak cpu = peak_for({}, Precision::kFp32, 0);
  EXPECT_EQ(cpu.tflops, 0);
  EXPECT_NE(cpu.source.find("--peak-tflops"), std::string::npos);
  // The override wins over a known peak too.
  EXPECT_EQ(peak_for({"NVIDIA H200", 132, 143771 * kMiB}, Precision::kBf16, 500).tflops, 500);
  EXPECT_DOUBLE_EQ(mfu(1e12, 10, 2, {500, ""}, 2), 1e13 / 2 / (500e12 * 2));
}

// A peak below what the run achieved is no peak: it is rejected, named, and the next source in the
// order is used; with none left the MFU is NaN, never above 100%.
TEST(CheckedMfu, APeakBelowTheAchievedRateFallsBackToTheNextSource) {
  // 1e12 FLOP/sample x 10 samples in 2 s on 1 device: 5 TFLOP/s achieved.
  const std::vector<Peak> order = {{2, "measured (dtune-probe gemm): fp16 at 256^3"},
                                   {10, "datasheet"}};
  const CheckedMfu c = checked_mfu(1e12, 10, 2, order, order[0], 1);
  EXPECT_FALSE(c.valid);
  EXPECT_DOUBLE_EQ(c.mfu, 0.5);
  EXPECT_EQ(c.peak.source, "datasheet");
  EXPECT_NE(c.rejected.find("fp16 at 256^3: 2 TFLOP/s per device, below the 5 TFLOP/s"),
            std::string::npos)
      << c.rejected;
  const CheckedMfu none = checked_mfu(1e12, 10, 2, {order[0]}, order[0], 1);
  EXPECT_FALSE(none.valid);
  EXPECT_TRUE(std::isnan(none.mfu));
  EXPECT_EQ(none.peak.tflops, 0);
  EXPECT_NE(none.peak.source.find("fp16 at 256^3"), std::string::npos);
  // A peak that holds is kept as it is; exactly 100% holds.
  const CheckedMfu ok = checked_mfu(1e12, 10, 2, {{5, "exact"}, {10, "next"}}, {5, "exact"}, 1);
  EXPECT_TRUE(ok.valid);
  EXPECT_DOUBLE_EQ(ok.mfu, 1.0);
  EXPECT_EQ(ok.peak.source, "exact");
  EXPECT_TRUE(ok.rejected.empty());
  // No source at all: NaN as before, nothing rejected.
  const CheckedMfu unknown = checked_mfu(1e12, 10, 2, {}, {0, "unknown"}, 1);
  EXPECT_TRUE(unknown.valid);
  EXPECT_TRUE(std::isnan(unknown.mfu));
}

TEST(GptFlops, CountedForwardAndLlmcFormulaCountTheSameMatmuls) {
  for (const auto& [context, vocab] : {std::pair<int64_t, int64_t>{0, 0}, {16, 128}}) {
    models::ModelOptions o;
    o.context = context;
    o.vocab = vocab;
    const auto m = models::make_model("gpt2-tiny", o);
    const models::FlopCount f = m->flops();
    const double L = 2, C = 128, T = context ? context : 128, V = vocab ? vocab : 1024;
    SCOPED_TRACE(T);
    // Parameters, from the architecture: 12C² weights and 13C biases and LayerNorm a layer, the
    // tied token embedding V·C, the position embedding T·C, the final LayerNorm 2C.
    const double N = L * (12 * C * C + 13 * C) + V * C + T * C + 2 * C;
    ASSERT_EQ(static_cast<double>(models::parameter_count(*m)), N);
    const double matmul_weights = L * 12 * C * C + V * C, non_matmul = L * 13 * C + 2 * C + T * C;
    // Counted forward: the matmul weights plus the causal attention's L·T·C MACs, per token.
    EXPECT_EQ(f.forward_macs, (matmul_weights + L * T * C) * T);
    // llm.c: (6N + 6LCT) per token; it and 6 x the counted forward differ by the non-matmul
    // parameters only, so the attention terms agree exactly.
    EXPECT_EQ(f.training_flops, (6 * N + 6 * L * C * T) * T);
    EXPECT_EQ(f.training_flops - 6 * f.forward_macs, 6 * non_matmul * T);
    EXPECT_EQ(f.formula, "6N+6LCT (llm.c)");
    // PaLM as nanoGPT's estimate_mfu: N without the position embedding, attention in full.
    EXPECT_EQ(f.alt_training_flops, (6 * (N - T * C) + 12 * L * C * T) * T);
    EXPECT_EQ(f.alt_formula, "6N+12LCT (PaLM, nanoGPT)");
    EXPECT_EQ(f.tokens, T);
  }
}

TEST(GptFlops, ResNetHasOneConvention) {
  const models::FlopCount f = models::make_model("resnet18", {})->flops();
  EXPECT_EQ(f.training_flops, 6 * f.forward_macs);
  EXPECT_TRUE(f.alt_formula.empty());
  EXPECT_TRUE(std::isnan(f.alt_training_flops));
}

}  // namespace
}  // namespace dtune::train
