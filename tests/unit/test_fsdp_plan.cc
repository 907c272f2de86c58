// dtune-comm --pattern fsdp without ranks: the calls of one FSDP step come in FSDP's order with
// sizes padded to a multiple of the ranks (reshard on and off, each placement), a model's units
// add up to its parameter count (and the totals to published ones), size units cut the model
// where they say, bad --shard-unit values are refused, and the summary's step totals are the sums
// of its calls with (n-1)/n for busbw.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "benchmarks/comm/fsdp_plan.h"
#include "benchmarks/comm/fsdp_summary.h"
#include "core/error.h"
#include "models/model_names.h"
#include "models/model_size.h"

namespace dtune::comm {
namespace {

// "AG0" for an all-gather of unit 0, "RS1" for a reduce-scatter of unit 1.
std::vector<std::string> sequence(const std::vector<FsdpCall>& calls) {
  std::vector<std::string> out;
  for (const FsdpCall& c : calls)
    out.push_back((c.shape.collective == Collective::kAllgather ? "AG" : "RS") +
                  std::to_string(c.unit));
  return out;
}

// Two units of 5 and 7 parameters: padded to 6 and 8 for 2 ranks, 6 and 9 for 3.
const models::ModelSize kTwoUnits = {12, {}, {{"a", 5}, {"b", 7}}, {5, 7}};

TEST(FsdpPlan, ReshardOnGathersAgainInBackward) {
  const auto units = shard_units(kTwoUnits, parse_shard_unit("block"), Dtype::kFloat32, 2);
  ASSERT_EQ(units.size(), 2u);
  EXPECT_EQ(units[0].padded, 6);
  EXPECT_EQ(units[1].padded, 8);
  EXPECT_EQ(units[0].bytes, 24u);
  EXPECT_EQ(units[1].bytes, 32u);
  const auto calls =
      fsdp_step_calls(units, Dtype::kFloat32, 2, Reshard::kOn, FsdpPlacement::kFsdp2);
  EXPECT_EQ(sequence(calls), (std::vector<std::string>{"AG0", "AG1", "AG1", "RS1", "AG0", "RS0"}));
  const std::vector<Phase> phases = {Phase::kForward,  Phase::kForward,  Phase::kBackward,
                                     Phase::kBackward, Phase::kBackward, Phase::kBackward};
  for (size_t i = 0; i < calls.size(); ++i) {
    const FsdpCall& c = calls[i];
    EXPECT_EQ(c.phase, phases[i]) << i;
    // The size column is the whole padded unit; each rank sends (all-gather) or receives
    // (reduce-scatter) one shard of it.
    EXPECT_EQ(c.shape.bytes, units[c.unit].bytes) << i;
    EXPECT_EQ(c.shape.count, static_cast<size_t>(units[c.unit].padded / 2)) << i;
    EXPECT_FALSE(c.shape.rounded()) << i;
    EXPECT_EQ(c.shape.dtype, Dtype::kFloat32);
    EXPECT_EQ(c.shape.op, ReduceOp::kSum);
    // FSDP2: all_gather_into_tensor in place, reduce_scatter_tensor out of place.
    EXPECT_EQ(c.placement, c.shape.collective == Collective::kAllgather ? Placement::kInPlace
                                                                        : Placement::kOutOfPlace)
        << i;
  }
  EXPECT_EQ(calls[3].shape.send_count, 8u);  // RS1: the whole gradient in
  EXPECT_EQ(calls[3].shape.recv_count, 4u);  // and one shard out
  EXPECT_EQ(calls[1].shape.send_count, 4u);  // AG1: one shard in
  EXPECT_EQ(calls[1].shape.recv_count, 8u);  // and the whole unit out
}

TEST(FsdpPlan, ReshardOffGathersOnce) {
  const auto units = shard_units(kTwoUnits, parse_shard_unit("block"), Dtype::kBfloat16, 3);
  EXPECT_EQ(units[0].padded, 6);
  EXPECT_EQ(units[1].padded, 9);
  EXPECT_EQ(units[1].bytes, 18u);
  const auto calls =
      fsdp_step_calls(units, Dtype::kBfloat16, 3, Reshard::kOff, FsdpPlacement::kOutOfPlace);
  EXPECT_EQ(sequence(calls), (std::vector<std::string>{"AG0", "AG1", "RS1", "RS0"}));
  for (const FsdpCall& c : calls) {
    EXPECT_EQ(c.placement, Placement::kOutOfPlace);
    EXPECT_EQ(c.shape.bytes, units[c.unit].bytes);
    EXPECT_EQ(c.shape.count, static_cast<size_t>(units[c.unit].padded / 3));
  }
  for (const FsdpCall& c :
       fsdp_step_calls(units, Dtype::kBfloat16, 3, Reshard::kOn, FsdpPlacement::kInPlace))
    EXPECT_EQ(c.placement, Placement::kInPlace);
}

// Every model's units add up to its parameter count; two totals against published ones.
TEST(FsdpPlan, UnitsSumToTheModelsParameters) {
  for (const std::string& name : models::model_names()) {
    const models::ModelSize s = models::model_size(name, {});
    int64_t sum = 0;
    for (const auto& u : s.units) sum += u.parameters;
    EXPECT_EQ(sum, s.parameters) << name;
  }
  models::ModelOptions gpt2;
  gpt2.vocab = 50257;  // GPT-2 small's 124,439,808 (llm.c, the tied head once)
  EXPECT_EQ(models::model_size("gpt2-d12", gpt2).parameters, 124439808);
  const models::ModelSize r18 = models::model_size("resnet18", {});
  EXPECT_EQ(r18.parameters, 11689512);  // torchvision's resnet18
  std::vector<std::string> names;
  for (const auto& u : r18.units) names.push_back(u.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"stem", "layer1", "layer2", "layer3", "layer4", "fc"}));
  EXPECT_EQ(r18.units.front().parameters, 3 * 64 * 49 + 2 * 64);  // conv1, bn1
  EXPECT_EQ(r18.units.back().parameters, 512 * 1000 + 1000);      // fc
}

// gpt2-tiny (L 2, C 128, T 128, V 1024): embed V·C + T·C, blocks 12C²+13C, ln_f 2C.
TEST(FsdpPlan, GptTinyBlocks) {
  const FsdpPlan p = make_fsdp_plan("gpt2-tiny", parse_shard_unit("block"), Dtype::kFloat32, 2,
                                    Reshard::kOn, FsdpPlacement::kFsdp2);
  EXPECT_EQ(p.model_parameters, 544256);
  ASSERT_EQ(p.units.size(), 4u);
  const std::vector<std::pair<std::string, int64_t>> expected = {{"embed", 1024 * 128 + 128 * 128},
                                                                 {"h.0", 12 * 128 * 128 + 13 * 128},
                                                                 {"h.1", 12 * 128 * 128 + 13 * 128},
                                                                 {"ln_f", 2 * 128}};
  for (size_t u = 0; u < 4; ++u) {
    EXPECT_EQ(p.units[u].name, expected[u].first);
    EXPECT_EQ(p.units[u].parameters, expected[u].second);
    EXPECT_EQ(p.units[u].bytes, static_cast<size_t>(expected[u].second) * 4);
  }
  EXPECT_EQ(p.calls.size(), 12u);
}

// Size units are whole parameters grouped as gradient buckets are (models/bucket_plan.h), in
// reverse parameter order, then listed in forward order: 0.5 MiB of float32 is 131,072 elements,
// and gpt2-tiny's (wte 1024x128, wpe 128x128, 2 blocks of 12 parameters, ln_f) make these units,
// as report/dtune_report/scaling_model.py plan_buckets cuts them (computed there); in bfloat16
// the cap holds twice the elements. The wte (131,072 elements) fills a unit of its own.
TEST(FsdpPlan, SizeUnitsAreCutAsBucketsAre) {
  const models::ModelSize size = models::model_size("gpt2-tiny", {});
  const auto f32 = shard_units(size, parse_shard_unit("0.5"), Dtype::kFloat32, 3);
  const std::vector<int64_t> want32 = {131072, 65792, 82688, 115584, 82688, 66432};
  ASSERT_EQ(f32.size(), want32.size());
  int64_t sum = 0;
  for (size_t u = 0; u < f32.size(); ++u) {
    EXPECT_EQ(f32[u].parameters, want32[u]) << u;
    EXPECT_EQ(f32[u].name, "part." + std::to_string(u));
    EXPECT_EQ(f32[u].padded % 3, 0);
    EXPECT_LT(f32[u].padded - f32[u].parameters, 3);
    sum += f32[u].parameters;
  }
  EXPECT_EQ(sum, 544256);
  EXPECT_EQ(f32[1].padded, 65793);  // a multiple of 3
  const auto bf16 = shard_units(size, parse_shard_unit("0.5"), Dtype::kBfloat16, 2);
  const std::vector<int64_t> want16 = {131072, 214528, 198656};
  ASSERT_EQ(bf16.size(), want16.size());
  for (size_t u = 0; u < bf16.size(); ++u) EXPECT_EQ(bf16[u].parameters, want16[u]) << u;
  EXPECT_EQ(bf16[1].bytes, 214528u * 2);
}

TEST(FsdpPlan, RefusesBadUnits) {
  // 9e12 MiB and more: past 2^63 bytes, a cap that wrapped (every parameter a unit of its own).
  for (const char* bad :
       {"0", "-1", "abc", "", "4x", "inf", "nan", "-0.5", "9e12", "1e300", "1073741824.5"})
    EXPECT_THROW(parse_shard_unit(bad), UsageError) << bad;
  EXPECT_TRUE(parse_shard_unit("block").per_block);
  EXPECT_DOUBLE_EQ(parse_shard_unit("0.25").mib, 0.25);
  EXPECT_EQ(parse_shard_unit("0.25").cap_bytes(), 262144);
  EXPECT_EQ(parse_shard_unit("1073741824").cap_bytes(), int64_t{1} << 50);  // the largest: 1 PiB
  // The largest unit holds the whole model: one unit, not one per parameter.
  EXPECT_EQ(shard_units(models::model_size("gpt2-tiny", {}), parse_shard_unit("1073741824"),
                        Dtype::kFloat32, 2)
                .size(),
            1u);
  const models::ModelSize size = models::model_size("gpt2-tiny", {});
  // Less than one element; more than kMaxFsdpUnits units (gpt2-tiny has 28 parameters: a cap
  // below the smallest makes each its own unit, so only a larger model could exceed it).
  EXPECT_THROW(shard_units(size, parse_shard_unit("1e-7"), Dtype::kFloat32, 2), UsageError);
  models::ModelSize many = size;
  many.param_elems.assign(kMaxFsdpUnits + 1, 1);
  EXPECT_THROW(shard_units(many, parse_shard_unit("0.000004"), Dtype::kFloat32, 2), UsageError);
  EXPECT_THROW(make_fsdp_plan("gpt3", parse_shard_unit("block"), Dtype::kFloat32, 2, Reshard::kOn,
                              FsdpPlacement::kFsdp2),
               UsageError);
}

// The step's totals are the sums over its calls; busbw is algbw x (n-1)/n.
TEST(FsdpSummary, StepTotalsAreTheCallsSums) {
  const FsdpPlan plan = make_fsdp_plan("gpt2-tiny", parse_shard_unit("block"), Dtype::kFloat32, 2,
                                       Reshard::kOn, FsdpPlacement::kFsdp2);
  const size_t C = plan.calls.size(), I = 2;
  // Rank r's call i takes (i + 1) × (r + 1) µs every iteration; rank 1 found one wrong element in
  // call 5.
  std::vector<double> all;
  for (int r = 0; r < 2; ++r) {
    std::vector<RankSample> mine(C);
    for (size_t i = 0; i < C; ++i) {
      auto& p = mine[i].placement[placement_index(plan.calls[i].placement)];
      p.run = true;
      p.times_us.assign(I, static_cast<double>((i + 1) * static_cast<size_t>(r + 1)));
      p.checked = true;
      p.wrong = (r == 1 && i == 5) ? 1 : 0;
    }
    const auto packed = pack_calls(mine, I);
    all.insert(all.end(), packed.begin(), packed.end());
  }
  const FsdpSummary s = summarize_fsdp(plan, unpack_calls(all, 2, C, I), TimeMode::kAvg);
  double time = 0, forward = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < C; ++i) {
    const double t = 1.5 * static_cast<double>(i + 1);  // the mean of 1x and 2x
    EXPECT_DOUBLE_EQ(s.calls[i].placement[placement_index(plan.calls[i].placement)].time_us, t);
    time += t;
    if (plan.calls[i].phase == Phase::kForward) forward += t;
    bytes += plan.calls[i].shape.bytes;
  }
  EXPECT_DOUBLE_EQ(s.step_time_us, time);
  EXPECT_DOUBLE_EQ(s.forward_time_us, forward);
  EXPECT_DOUBLE_EQ(s.backward_time_us, time - forward);
  EXPECT_EQ(s.step_bytes, bytes);
  EXPECT_DOUBLE_EQ(s.step_algbw_gbps, static_cast<double>(bytes) / time / 1e3);
  EXPECT_DOUBLE_EQ(s.step_busbw_gbps, s.step_algbw_gbps / 2);
  EXPECT_EQ(s.wrong, 1);
  EXPECT_EQ(s.status, "wrong");
}

}  // namespace
}  // namespace dtune::comm
