// Gathering, printing and writing the pipeline's per-stage measurements.
#include "train/pipeline/pipeline_results.h"

#include <algorithm>
#include <map>

#include "core/gather.h"
#include "train/pipeline/schedule.h"

namespace dtune::train {
namespace {

constexpr size_t kRowFields = 11;   // stage, dp, forward, backward, recv, send, idle, span, bubble,
                                    // peak activation bytes, planned share
constexpr size_t kEventFields = 5;  // backward, micro, chunk, start, end

}  // namespace

namespace {

// This rank's row, events and per-step scaling, flattened as the gathers send them.
struct LocalPipeline {
  std::vector<double> row, events, scaling;
};

LocalPipeline local_pipeline(const Options& o, const PipelineStats& st) {
  PipelineRow mine{st.stage, st.dp_index};
  size_t n = 0;
  for (size_t s = static_cast<size_t>(o.warmup_steps); s < st.steps.size(); ++s, ++n) {
    const PipelineStepTimes& t = st.steps[s];
    mine.forward_ms += t.forward_ms;
    mine.backward_ms += t.backward_ms;
    mine.recv_wait_ms += t.recv_wait_ms;
    mine.send_wait_ms += t.send_wait_ms;
    mine.span_ms += t.span_ms;
    mine.bubble += t.bubble;
  }
  // Measured steps only: the first step also allocates the gradients and the optimizer's state.
  for (size_t s = static_cast<size_t>(o.warmup_steps); s < st.steps.size(); ++s)
    mine.peak_activation_bytes =
        std::max<long long>(mine.peak_activation_bytes, st.steps[s].peak_activation_bytes);
  const double k = n > 0 ? 1.0 / static_cast<double>(n) : 0.0;
  for (double* v : {&mine.forward_ms, &mine.backward_ms, &mine.recv_wait_ms, &mine.send_wait_ms,
                    &mine.span_ms, &mine.bubble})
    *v *= k;
  // Idle: the span less everything this stage did or waited on.
  mine.idle_ms = std::max(0.0, mine.span_ms - mine.forward_ms - mine.backward_ms -
                                   mine.recv_wait_ms - mine.send_wait_ms);
  LocalPipeline l;
  l.row = {static_cast<double>(mine.stage),
           static_cast<double>(mine.dp_index),
           mine.forward_ms,
           mine.backward_ms,
           mine.recv_wait_ms,
           mine.send_wait_ms,
           mine.idle_ms,
           mine.span_ms,
           mine.bubble,
           static_cast<double>(mine.peak_activation_bytes),
           st.planned_share};
  for (const auto& e : st.timeline)
    l.events.insert(l.events.end(), {static_cast<double>(e.backward), static_cast<double>(e.micro),
                                     static_cast<double>(e.chunk), e.start_ms, e.end_ms});
  for (const auto& s : st.steps)  // (S, 3) of this rank: loss scale, found inf, skipped
    l.scaling.insert(l.scaling.end(), {s.loss_scale, static_cast<double>(s.found_inf),
                                       static_cast<double>(s.skipped)});
  return l;
}

// The table from every rank's rows, events and scaling (rank order), `per_rank` events each.
PipelineTable make_table(const PipelineStats& st, const std::vector<double>& rows, size_t per_rank,
                         const std::vector<double>& all_events,
                         const std::vector<double>& all_scaling) {
  PipelineTable t;
  t.cuts = st.cuts;
  t.partitioned = st.partitioned;
  t.channel = st.channel;
  t.theory_bubble = st.theory_bubble;
  for (size_t i = 0; i + kRowFields <= rows.size(); i += kRowFields) {
    PipelineRow r;
    r.stage = static_cast<int>(rows[i]);
    r.dp_index = static_cast<int>(rows[i + 1]);
    r.forward_ms = rows[i + 2], r.backward_ms = rows[i + 3], r.recv_wait_ms = rows[i + 4];
    r.send_wait_ms = rows[i + 5], r.idle_ms = rows[i + 6], r.span_ms = rows[i + 7];
    r.bubble = rows[i + 8];
    r.peak_activation_bytes = static_cast<long long>(rows[i + 9]);
    r.planned_share = rows[i + 10];
    t.ranks.push_back(r);
  }
  for (size_t i = 0; i < all_events.size() / kEventFields; ++i) {
    t.timeline.push_back(static_cast<double>(per_rank ? i / per_rank : 0));
    t.timeline.insert(t.timeline.end(), all_events.begin() + static_cast<long>(i * kEventFields),
                      all_events.begin() + static_cast<long>((i + 1) * kEventFields));
  }
  // Every rank ran the same steps: transposed to (S, R), as the step datasets.
  t.steps = st.steps.size();
  const size_t R = t.ranks.size();
  for (size_t s = 0; s < t.steps; ++s)
    for (size_t r = 0; r < R; ++r) {
      const double* x = &all_scaling[(r * t.steps + s) * 3];
      t.loss_scale.push_back(x[0]);
      t.found_inf.push_back(static_cast<int64_t>(x[1]));
      t.skipped.push_back(static_cast<int64_t>(x[2]));
    }
  return t;
}

}  // namespace

PipelineTable gather_pipeline(const Options& o, const RunContext& ctx, const PipelineStats& st) {
  const LocalPipeline l = local_pipeline(o, st);
  const std::vector<double> rows = gather_doubles(ctx.comm(), l.row);
  // Ranks have the same number of events (M x V forwards and backwards each): gather_doubles
  // concatenates them in rank order.
  const std::vector<double> all_events = gather_doubles(ctx.comm(), l.events);
  const std::vector<double> all_scaling = gather_doubles(ctx.comm(), l.scaling);  // (R, S, 3)
  if (!ctx.is_root()) {
    PipelineTable t;
    t.cuts = st.cuts;
    t.partitioned = st.partitioned;
    t.channel = st.channel;
    t.theory_bubble = st.theory_bubble;
    return t;
  }
  return make_table(st, rows, l.events.size() / kEventFields, all_events, all_scaling);
}

PipelineTable local_pipeline_table(const Options& o, const PipelineStats& st) {
  const LocalPipeline l = local_pipeline(o, st);
  PipelineTable t = make_table(st, l.row, l.events.size() / kEventFields, l.events, l.scaling);
  t.partial = true;
  return t;
}

void print_pipeline(const Options& o, const PipelineTable& t, FILE* f) {
  const auto& p = o.pipeline;
  std::fprintf(f,
               "# pipeline: %d stages x %zu data-parallel groups, %d micro-batches, schedule %s%s, "
               "layout %s, channel %s\n",
               p.stages, t.ranks.size() / static_cast<size_t>(p.stages), p.micro_batches,
               to_string(p.schedule).c_str(),
               chunks_per_stage(p.schedule, p.virtual_stages) > 1
                   ? (" (" + std::to_string(chunks_per_stage(p.schedule, p.virtual_stages)) +
                      " chunks per stage)")
                         .c_str()
                   : "",
               to_string(p.layout).c_str(), t.channel.c_str());
  std::fprintf(f, "#   cut points: %s\n#   partitioned by %s\n", t.cuts.c_str(),
               t.partitioned.c_str());
  std::fprintf(f, "# %-5s %5s %3s %10s %10s %10s %10s %10s %10s %8s %8s %12s %8s %8s\n", "rank",
               "stage", "dp", "forward", "backward", "recv_wait", "send_wait", "idle", "span_ms",
               "bubble", "theory", "peak_act_MiB", "plan", "measured");
  // Each stage's share of its pipeline's compute, beside the plan's share of the cost.
  std::map<int, double> compute;  // per data-parallel index
  for (const auto& x : t.ranks) compute[x.dp_index] += x.forward_ms + x.backward_ms;
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    const PipelineRow& x = t.ranks[r];
    const double all = compute[x.dp_index];
    std::fprintf(f,
                 "  %-5zu %5d %3d %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %7.1f%% %7.1f%% %12.2f "
                 "%7.1f%% %7.1f%%\n",
                 r, x.stage, x.dp_index, x.forward_ms, x.backward_ms, x.recv_wait_ms,
                 x.send_wait_ms, x.idle_ms, x.span_ms, 100 * x.bubble, 100 * t.theory_bubble,
                 static_cast<double>(x.peak_activation_bytes) / (1 << 20), 100 * x.planned_share,
                 all > 0 ? 100 * (x.forward_ms + x.backward_ms) / all : 0.0);
  }
  std::fprintf(f,
               "#   (ms per step, means over the measured steps; bubble = 1 - (forward + backward) "
               "/ span; plan: the stage's share of the partition's cost, measured: its share of "
               "the pipeline's forward + backward time)\n");
}

void write_pipeline(hid_t run_group, const Options& o, const PipelineTable& t) {
  h5::Handle g = h5::create_group(run_group, "pipeline");
  const hid_t id = g.get();
  h5::write_attr(id, "cuts", t.cuts);
  h5::write_attr(id, "partitioned", t.partitioned);
  h5::write_attr(id, "theory_bubble", t.theory_bubble);
  h5::write_attr(id, "channel", t.channel);
  h5::write_attr(id, "schedule", to_string(o.pipeline.schedule));
  // Every rank's row, or (a run that timed out) rank 0's alone.
  h5::write_attr(id, "ranks_reported", static_cast<int64_t>(t.ranks.size()));
  h5::write_attr(id, "complete", static_cast<int64_t>(t.partial ? 0 : 1));
  const size_t R = t.ranks.size();
  std::vector<int64_t> stage, dp, peak;
  std::vector<double> fwd, bwd, recv, send, idle, span, bubble, planned;
  for (const auto& x : t.ranks) {
    stage.push_back(x.stage), dp.push_back(x.dp_index), peak.push_back(x.peak_activation_bytes);
    fwd.push_back(x.forward_ms), bwd.push_back(x.backward_ms), recv.push_back(x.recv_wait_ms);
    send.push_back(x.send_wait_ms), idle.push_back(x.idle_ms), span.push_back(x.span_ms);
    bubble.push_back(x.bubble), planned.push_back(x.planned_share);
  }
  h5::write_dataset(id, "stage", {R}, stage.data());
  h5::write_dataset(id, "dp_index", {R}, dp.data());
  h5::write_dataset(id, "peak_activation_bytes", {R}, peak.data());
  h5::write_dataset(id, "forward_ms", {R}, fwd.data());
  h5::write_dataset(id, "backward_ms", {R}, bwd.data());
  h5::write_dataset(id, "recv_wait_ms", {R}, recv.data());
  h5::write_dataset(id, "send_wait_ms", {R}, send.data());
  h5::write_dataset(id, "idle_ms", {R}, idle.data());
  h5::write_dataset(id, "span_ms", {R}, span.data());
  h5::write_dataset(id, "bubble", {R}, bubble.data());
  h5::write_dataset(id, "planned_share", {R}, planned.data());
  h5::write_dataset(id, "timeline", {t.timeline.size() / 6, 6}, t.timeline.data());
  h5::write_dataset(id, "loss_scale", {t.steps, R}, t.loss_scale.data());
  h5::write_dataset(id, "found_inf", {t.steps, R}, t.found_inf.data());
  h5::write_dataset(id, "skipped", {t.steps, R}, t.skipped.data());
}

}  // namespace dtune::train
