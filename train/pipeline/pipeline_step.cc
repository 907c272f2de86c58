// The pipeline-parallel training loop.
#include "train/pipeline/pipeline_step.h"

#include <malloc.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "core/device_info.h"
#include "core/error.h"
#include "models/pieces.h"
#include "models/registry.h"
#include "models/weight_grad_store.h"
#include "models/weights.h"
#include "train/cuda_device.h"
#include "train/data.h"
#include "train/device_timeline.h"
#include "train/fault_injector.h"
#include "train/grad_sync.h"
#include "train/memory_meter.h"
#include "train/observers.h"
#include "train/param_sharding.h"
#include "train/pipeline/partition.h"
#include "train/pipeline/piece_timer.h"
#include "train/pipeline/pipeline_channel.h"
#include "train/pipeline/pipeline_results.h"
#include "train/pipeline/pipeline_trace.h"
#include "train/pipeline/schedule.h"
#include "train/pipeline/topology.h"
#include "train/precision.h"
#include "train/reducer.h"
#include "train/run_monitor.h"
#include "train/setup.h"
#include "train/telemetry/profiler.h"
#include "train/telemetry/trace_log.h"

namespace dtune::train {
namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Every interval of a step is a pair of marks on the stage's DeviceTimeline (on a GPU, CUDA events
// on the compute stream), read after the schedule and at the end of the step: no host clock is
// read around the model's calls, whose kernels the host only queues.
struct MarkedSpan {
  StageActivity activity;
  int micro, chunk, peer;
  size_t from, to;  // marks
};

// The waits inside a step give up at this fraction of --timeout, before the watchdog's abort of
// the whole step, so the stage that waits names the stage it waited for.
// For the same reason every exchange within a pipeline is point-to-point: a collective's wait could
// not say who is missing.
constexpr double kWaitShareOfTimeout = 0.9;
// Tags of the control messages, above every activation's and gradient's (tag() below).
constexpr int kStartTag = 400'000'000, kEndTag = kStartTag + 1, kTiedTag = kStartTag + 2;
// --data: stage 0 loads each micro-batch and sends its targets to the last stage under this tag +
// the micro-batch (above the tied gradients' tags, one per tied parameter).
constexpr int kTargetTag = kStartTag + 1000;
// glibc hands the top of its heap back to the OS when more than the trim threshold is free there,
// and serves blocks above the mmap threshold by mmap, unmapped on free; both thresholds start at
// 128 KiB and adapt. A step frees all its activations at its end (GPipe all M micro-batches' at
// once), so memory went back and forth every step and the next step touched it again through page
// faults: ~700 per step on the last stage under GPipe and ~2,000 under 1F1B for the tiny GPT. The
// heap is kept instead (it is this step's peak, which the next step needs again), and blocks up to
// 32 MiB (glibc's most) come from it.
constexpr int kKeptHeapBytes = 1 << 30, kMmapAboveBytes = 32 << 20;

struct Chunk {
  int virtual_stage = 0;      // chunk x P + stage
  size_t begin = 0, end = 0;  // pieces
};

// A micro-batch in flight through one chunk: its input (a leaf that collects the gradient to send
// back; undefined on the first virtual stage) and its output (the scaled loss on the last).
struct InFlight {
  torch::Tensor input, output;
};

class PipelineStep final : public StepStrategy {
 public:
  PipelineStep(TrainSetup& s, const RunContext& ctx, RunMonitor& monitor);
  std::string describe_step(int step) const override;
  double global_batch() const override {
    return static_cast<double>(s_.batch) * topo_.dp_size() * M_;
  }
  bool replicated() const override { return false; }
  std::unique_ptr<StepObserver> observer() override;
  void run_step(int step, StepRecord& rec, const FaultInjector& faults) override;
  void finish(TrainOutcome& out) override;
  // --profile-steps: after the profiler's window closes, every stage's spans go into the
  // one-row-per-stage trace (collective).
  void end_profile(int step);

 private:
  void setup_partition();
  void forward(const Action& a);
  void backward(const Action& a);
  void backward_weight(const Action& a);  // a zero-bubble schedule's W
  int store_key(const Action& a) const { return a.chunk * M_ + a.micro; }
  // Tag of the edge between virtual stages v and v + 1 for micro-batch m, in one direction.
  int tag(int v, int m, bool gradient) const { return (v * M_ + m) * 2 + (gradient ? 1 : 0); }
  // The stage that holds virtual stage v (schedule.h: v mod P, or zb-v's V).
  int stage_at(int v) const { return stage_of(o_.pipeline.schedule, P_, v); }
  void chunk_sleep(double factor) const;
  // Stage 0 receives `mine` from every other stage, then sends each of them combine(all, in stage
  // order); the others send theirs and receive that answer. Every wait names whom it waits for.
  torch::Tensor rendezvous(
      const torch::Tensor& mine, int tag, const std::string& what,
      const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& combine);
  void sum_tied_gradients();
  // A span of this stage on its trace row, while a profile window is open; times in ms since the
  // step's origin.
  void trace(StageActivity a, int micro, int chunk, int peer, double from_ms, double to_ms);
  // The schedule's marked spans, read: compute, waits and sends into `t`, the timeline's events.
  void account_schedule(const std::vector<double>& ms, double origin_ms, PipelineStepTimes& t,
                        std::vector<PipelineEvent>& events);

  // The parts every mode has: the model (whole on every rank), this stage's parameters, their
  // fp32 master copy (--weights-dtype bf16), the stage group's reducer and gradient sync, the
  // optimizer, the loss scaler (--precision fp16; one scale, equal on every stage), the data
  // source (synthetic: every stage holds its pipeline's micro-batches; --data: stage 0 alone loads
  // them, slice dp_index of dp_size, and sends the targets to the last stage; null elsewhere), the
  // trace log and the profiler.
  TrainSetup& s_;
  const Options& o_;
  const RunContext& ctx_;
  RunMonitor& monitor_;
  int P_, M_, V_, K_;
  PipelineTopology topo_;
  std::string stages_;  // "stage 0 (rank r), ...": this rank's pipeline, for the watchdog
  std::vector<models::Piece> pieces_;
  std::vector<size_t> starts_;  // of the K chunks (partition.h)
  std::vector<Chunk> chunks_;   // this stage's V
  std::vector<std::string> param_names_;
  std::vector<torch::Tensor> tied_;                    // held by both end stages: gradients summed
  bool targets_from_first_ = false;                    // --data on the last stage
  std::unique_ptr<DeviceTimeline> timeline_;           // this stage's device (or the host's)
  std::vector<MarkedSpan> marked_;                     // this step's, in schedule order
  std::vector<std::pair<size_t, size_t>> data_marks_;  // around each load (stage 0)
  std::unique_ptr<PipelineChannel> channel_;
  std::vector<std::vector<InFlight>> in_flight_;  // [chunk][micro]
  std::vector<Action> actions_;
  torch::Tensor loss_sum_;
  Deadline deadline_ = Deadline::after_s(0);
  Clock::time_point origin_;  // the step's common start (after the pipeline's barrier)
  Clock::time_point t_step_;  // this rank's start of the step: the timeline's zero
  int64_t run_peak_bytes_ = 0;
  bool same_node_as_first_ = false;  // this rank's steady clock is stage 0's
  double origin_first_us_ = 0;       // origin_ on stage 0's steady clock, in us
  int step_index_ = 0;
  std::vector<StageSpan> window_spans_;  // this stage's spans of the profile window
  // This stage's measurements: the mode's results, shared with the monitor while the steps run.
  std::shared_ptr<PipelineResults> results_;
  PipelineStats& stats_;
  bool scatter_ = false;  // zero2: the data-parallel sync reduce-scatters
  // The data-parallel sync runs as the last micro-batch's backward fills its buckets; else (several
  // chunks, or zero2 with tied parameters) it reduces every bucket after the schedule.
  bool overlap_ = true;
  // zero3: every micro-batch's backward reduce-scatters its gradients (GradSync with one bucket
  // per unit, adding the parts up), as the data-parallel step does.
  bool per_micro_ = false;
  // A zero-bubble schedule: forwards record their linear layers into the store, B keeps their
  // output gradients there, W computes their weight gradients.
  bool split_backward_ = false;
  models::WeightGradStore weight_grads_;
  // zb-v: what passes between this stage's own two chunks (the V's bottom on the last stage, the
  // targets on stage 0), under the tag a message would have had.
  std::map<int, torch::Tensor> handed_;
};

// The pipeline's observer, between the monitor's and the profiler's: the trace window's gather
// after the profiler has closed the window's last step, still armed.
class PipelineTraceObserver final : public StepObserver {
 public:
  explicit PipelineTraceObserver(PipelineStep& step) : step_(step) {}
  void end_step(int step, const StepRecord&, TrainOutcome&) override { step_.end_profile(step); }

 private:
  PipelineStep& step_;
};

PipelineStep::PipelineStep(TrainSetup& s, const RunContext& ctx, RunMonitor& monitor)
    : s_(s),
      o_(s.o),
      ctx_(ctx),
      monitor_(monitor),
      P_(o_.pipeline.stages),
      M_(o_.pipeline.micro_batches),
      V_(chunks_per_stage(o_.pipeline.schedule, o_.pipeline.virtual_stages)),
      K_(P_ * V_),
      topo_(*s.mesh),
      results_(std::make_shared<PipelineResults>(s.o)),
      stats_(results_->stats()) {
  const Options& o = o_;
  mallopt(M_TRIM_THRESHOLD, kKeptHeapBytes);  // process-wide; this process trains one pipeline
  mallopt(M_MMAP_THRESHOLD, kMmapAboveBytes);
  timeline_ = make_timeline(s_.ordinal);
  // Every rank built the whole model from the same seed, so every stage's parameters start as
  // one process's would; the data-parallel broadcast below makes that explicit, as DDP does.
  pieces_ = models::model_pieces(*s_.model);
  auto armed = monitor_.arm("setting up the pipeline (partition, stage groups, parameters)");
  setup_partition();
  if (o.shard == ShardMode::kZero3) {  // its units are cut from this stage's pieces
    s_.stage_pieces.assign(pieces_.begin() + static_cast<long>(chunks_.front().begin),
                           pieces_.begin() + static_cast<long>(chunks_.front().end));
    s_.stage_param_names = param_names_;
  }
  {
    const uint64_t mine = std::hash<std::string>{}(ctx.host());
    uint64_t first = mine;
    DTUNE_MPI_CHECK(MPI_Bcast(&first, 1, MPI_UINT64_T, 0, topo_.pipe()));
    same_node_as_first_ = first == mine;
  }
  // --backend nccl: the stages' tensors and each stage group's gradients go over NCCL.
  channel_ = make_pipeline_channel(o, ctx, topo_, s_.ordinal, !tied_.empty());
  armed.disarm();
  // The stage group's reducer, the stage's parameters over it (replicated, or sharded by --shard
  // zero1 or zero2: Megatron-LM's distributed optimizer), the scaler, the data (a dataset: stage 0
  // alone loads it, slice dp_index of dp_size) and the profiler.
  build_shared_parts(s_, ctx, &monitor_);
  // zero2 drops the whole gradients once they are reduce-scattered: the tied embedding's are then
  // summed between the end stages before the reduction, which waits for the schedule's end.
  scatter_ = s_.sharding->reduce_scatters();
  per_micro_ = o.shard == ShardMode::kZero3;
  split_backward_ = o.pipeline.schedule == Schedule::kZbH1 || o.pipeline.schedule == Schedule::kZbV;
  // The weight gradients are complete only after the last W, which the schedule runs late and
  // outside autograd's hooks: the buckets are reduced after the schedule.
  overlap_ = V_ == 1 && !(scatter_ && !tied_.empty()) && !split_backward_;
  // The stage that computes the loss: the last one, or under zb-v stage 0 itself.
  targets_from_first_ = o.data != "synthetic" && topo_.stage() == stage_at(K_ - 1);
  actions_ = stage_actions(o.pipeline.schedule, P_, M_, V_, topo_.stage());
  in_flight_.assign(V_, std::vector<InFlight>(M_));

  PipelineStats& st = stats_;
  st.stages = P_;
  st.stage = topo_.stage();
  st.dp_index = topo_.dp_index();
  st.cuts = describe_cuts(pieces_, starts_);
  st.theory_bubble = theoretical_bubble(o.pipeline.schedule, P_, M_, V_);
  st.channel = channel_->name();
  monitor_.watch_mode(results_);

  // The watchdog names a missing rank by number: the stages of this rank's pipeline say which
  // stage that is when the step timed out in a collective (the per-step exchange) rather than in
  // a point-to-point wait, which names the stage itself.
  for (int st = 0; st < P_; ++st)
    stages_ += (st ? ", " : "") + std::string("stage ") + std::to_string(st) + " (rank " +
               std::to_string(topo_.rank_of(st)) + ")";
}

std::string PipelineStep::describe_step(int step) const {
  return "pipeline training step " + std::to_string(step) + " (stage " +
         std::to_string(topo_.stage()) + " of " + std::to_string(P_) + ", batch " +
         std::to_string(s_.batch) + "; its pipeline: " + stages_ + ")";
}

std::unique_ptr<StepObserver> PipelineStep::observer() {
  return std::make_unique<PipelineTraceObserver>(*this);
}

void PipelineStep::setup_partition() {
  std::vector<PieceCost> costs;
  if (o_.pipeline.partition == PartitionBy::kMeasured) {
    // Rank 0 times each piece once; every rank cuts by its times, so the ranks agree.
    std::vector<double> ms = ctx_.is_root()
                                 ? time_pieces(*s_.model, pieces_, s_.batch, o_, s_.device)
                                 : std::vector<double>(pieces_.size());
    DTUNE_MPI_CHECK(MPI_Bcast(ms.data(), static_cast<int>(ms.size()), MPI_DOUBLE, 0, ctx_.comm()));
    for (size_t i = 0; i < pieces_.size(); ++i) costs.push_back({pieces_[i].kind, ms[i]});
  } else {
    for (const auto& p : pieces_) costs.push_back({p.kind, p.forward_macs});
  }
  starts_ = partition_pieces(costs, K_, o_.pipeline.pieces != StagePieces::kBlocks);
  auto chunk_end = [&](int k) { return k + 1 < K_ ? starts_[k + 1] : pieces_.size(); };
  std::vector<double> chunk_cost(K_, 0.0);
  for (int k = 0; k < K_; ++k)
    for (size_t i = starts_[k]; i < chunk_end(k); ++i) chunk_cost[k] += costs[i].cost;
  const double total = std::accumulate(chunk_cost.begin(), chunk_cost.end(), 0.0);
  std::string each;
  for (int k = 0; k < K_; ++k) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.3g", k ? " " : "", chunk_cost[k]);
    each += buf;
  }
  double own = 0;  // this stage's chunks' cost
  for (int c = 0; c < V_; ++c)
    own += chunk_cost[virtual_stage(o_.pipeline.schedule, P_, topo_.stage(), c)];
  stats_.planned_share = total > 0 ? own / total : 0;
  stats_.partitioned =
      to_string(o_.pipeline.partition) + " (" +
      (o_.pipeline.partition == PartitionBy::kMeasured ? "ms" : "forward MACs/sample") +
      " per chunk: " + each + ")";
  // This stage's chunks, and the parameters their pieces use (in the model's order).
  auto names_of_stage = [&](int stage) {
    std::set<std::string> names;
    for (int c = 0; c < V_; ++c) {
      const int k = virtual_stage(o_.pipeline.schedule, P_, stage, c);
      for (size_t i = starts_[k]; i < chunk_end(k); ++i)
        names.insert(pieces_[i].parameters.begin(), pieces_[i].parameters.end());
    }
    return names;
  };
  for (int c = 0; c < V_; ++c) {
    const int k = virtual_stage(o_.pipeline.schedule, P_, topo_.stage(), c);
    chunks_.push_back({k, starts_[k], chunk_end(k)});
  }
  // A parameter both end stages use is tied between them (summed); under zb-v one stage holds both
  // ends, and its gradient adds up within the stage.
  const int first_stage = stage_at(0), last_stage = stage_at(K_ - 1);
  const std::set<std::string> mine = names_of_stage(topo_.stage()),
                              first = names_of_stage(first_stage),
                              last = names_of_stage(last_stage);
  for (const auto& p : s_.model->named_parameters()) {
    if (!mine.contains(p.key())) continue;
    param_names_.push_back(p.key());
    s_.params.push_back(p.value());
    if (first_stage != last_stage && (topo_.first() || topo_.last()) && first.contains(p.key()) &&
        last.contains(p.key()))
      tied_.push_back(p.value());
  }
}

void PipelineStep::chunk_sleep(double factor) const {
  if (o_.pipeline.debug_chunk_sleep_ms <= 0) return;
  std::this_thread::sleep_for(
      std::chrono::duration<double, std::milli>(factor * o_.pipeline.debug_chunk_sleep_ms));
}

torch::Tensor PipelineStep::rendezvous(
    const torch::Tensor& mine, int tag, const std::string& what,
    const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& combine) {
  double waited = 0;
  if (!topo_.first()) {
    channel_->send(mine, 0, tag);
    return channel_->recv(0, tag, torch::kCPU, deadline_, what, waited);
  }
  std::vector<torch::Tensor> all{mine};
  for (int s = 1; s < P_; ++s)
    all.push_back(channel_->recv(s, tag, torch::kCPU, deadline_, what, waited));
  torch::Tensor reply = combine(all);
  for (int s = 1; s < P_; ++s) channel_->send(reply, s, tag);
  return reply;
}

void PipelineStep::sum_tied_gradients() {
  // The end stages swap their gradients of each tied parameter and both add: a + b equals b + a
  // exactly, so their copies stay identical.
  if (tied_.empty() || !(topo_.first() || topo_.last())) return;
  const int other = topo_.first() ? P_ - 1 : 0;
  double waited = 0;
  for (size_t i = 0; i < tied_.size(); ++i) {
    torch::Tensor& g = tied_[i].mutable_grad();
    torch::Tensor theirs = channel_->exchange(g, other, kTiedTag + static_cast<int>(i), deadline_,
                                              "tied embedding gradient", waited);
    torch::NoGradGuard no_grad;
    g.add_(theirs);
  }
}

void PipelineStep::trace(StageActivity a, int micro, int chunk, int peer, double from_ms,
                         double to_ms) {
  if (!s_.trace_log.enabled()) return;
  auto at = [&](double ms) {
    return origin_ + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double, std::milli>(ms));
  };
  const Clock::time_point t0 = at(from_ms), t1 = at(to_ms);
  TraceSpan span{to_string(a), TraceTrack::kPipeline, t0, t1, {{"step", step_index_}}};
  if (micro >= 0) {
    span.name += " " + std::to_string(micro);
    span.args.emplace_back("micro_batch", micro);
  }
  span.args.emplace_back("chunk", chunk);
  if (peer >= 0) span.args.emplace_back("peer_stage", peer);
  s_.trace_log.add(std::move(span));
  auto on_first = [&](Clock::time_point t) {
    return origin_first_us_ + std::chrono::duration<double, std::micro>(t - origin_).count();
  };
  window_spans_.push_back({a, step_index_, micro, chunk, peer, on_first(t0), on_first(t1)});
}

void PipelineStep::end_profile(int step) {
  if (!s_.profiler || step != o_.profile_first + o_.profile_steps - 1) return;
  gather_pipeline_trace(
      ctx_.comm(), {ctx_.rank(), topo_.stage(), topo_.dp_index()}, window_spans_,
      (std::filesystem::path(o_.profile_dir) / "pipeline" / "pipeline.trace.json").string());
  window_spans_.clear();
}

void PipelineStep::forward(const Action& a) {
  const Chunk& ch = chunks_[a.chunk];
  const int v = ch.virtual_stage;
  InFlight& f = in_flight_[a.chunk][a.micro];
  torch::Tensor x, target;
  double host_waited = 0;  // the channels' own host-clock figure; the marks time the wait instead
  if (v == 0) {
    const size_t d0 = timeline_->mark();
    Batch b = s_.data->next(a.micro);
    data_marks_.emplace_back(d0, timeline_->mark());
    x = b.input.to(s_.device);
    // A copy either way: the loader may reuse its buffers.
    if (o_.data != "synthetic" && stage_at(K_ - 1) == 0)  // zb-v: this stage's own loss
      handed_[kTargetTag + a.micro] = b.target.clone().to(s_.device);
    else if (o_.data != "synthetic")
      channel_->send(b.target.to(torch::kCPU).clone(), P_ - 1, kTargetTag + a.micro);
  } else if (stage_at(v - 1) == topo_.stage()) {  // zb-v: from this stage's other chunk
    f.input = handed_.extract(tag(v - 1, a.micro, false)).mapped().requires_grad_(true);
    x = f.input;
  } else {
    const size_t r0 = timeline_->mark();
    f.input = channel_->recv(stage_at(v - 1), tag(v - 1, a.micro, false), s_.device, deadline_,
                             "activation of micro-batch " + std::to_string(a.micro), host_waited);
    marked_.push_back(
        {StageActivity::kRecvWait, a.micro, v, stage_at(v - 1), r0, timeline_->mark()});
    f.input.requires_grad_(true);
    x = f.input;
  }
  if (v == K_ - 1 && targets_from_first_ && topo_.first()) {
    target = handed_.extract(kTargetTag + a.micro).mapped();
  } else if (v == K_ - 1 && targets_from_first_) {
    const size_t r0 = timeline_->mark();
    target = channel_->recv(0, kTargetTag + a.micro, s_.device, deadline_,
                            "the targets of micro-batch " + std::to_string(a.micro), host_waited);
    marked_.push_back({StageActivity::kRecvWait, a.micro, v, 0, r0, timeline_->mark()});
  }
  const size_t c0 = timeline_->mark();
  {
    AutocastGuard autocast(o_.precision, s_.device.type());
    std::optional<models::WeightGradStore::Recording> recording;
    if (split_backward_) recording.emplace(weight_grads_, store_key(a));
    x = s_.sharding->forward_chunk(pieces_, ch.begin, ch.end, x);
    if (v == K_ - 1) {
      if (!target.defined()) target = s_.data->next(a.micro).target.to(s_.device);
      torch::Tensor loss = s_.model->loss(x, target);
      loss_sum_ += loss.detach().to(torch::kFloat);
      x = s_.scaler->scale(loss / M_);  // fp16: every stage's gradients carry the scale
    }
  }
  chunk_sleep(1);
  const size_t c1 = timeline_->mark();
  f.output = x;
  if (v < K_ - 1 && stage_at(v + 1) == topo_.stage()) {
    handed_[tag(v, a.micro, false)] = x.detach();
  } else if (v < K_ - 1) {
    const size_t s0 = timeline_->mark();
    channel_->send(x, stage_at(v + 1), tag(v, a.micro, false));
    marked_.push_back({StageActivity::kSend, a.micro, v, stage_at(v + 1), s0, timeline_->mark()});
  }
  marked_.push_back({StageActivity::kForward, a.micro, a.chunk, -1, c0, c1});
}

void PipelineStep::backward(const Action& a) {
  const Chunk& ch = chunks_[a.chunk];
  const int v = ch.virtual_stage;
  InFlight& f = in_flight_[a.chunk][a.micro];
  torch::Tensor grad;
  if (v < K_ - 1 && stage_at(v + 1) == topo_.stage()) {  // zb-v: from this stage's other chunk
    grad = handed_.extract(tag(v, a.micro, true)).mapped();
  } else if (v < K_ - 1) {
    double host_waited = 0;
    const size_t r0 = timeline_->mark();
    grad = channel_->recv(stage_at(v + 1), tag(v, a.micro, true), s_.device, deadline_,
                          "gradient of micro-batch " + std::to_string(a.micro), host_waited);
    marked_.push_back(
        {StageActivity::kRecvWait, a.micro, v, stage_at(v + 1), r0, timeline_->mark()});
  }
  // One chunk: its last micro-batch's backward completes the gradients, and buckets are reduced as
  // they fill (overlapped). Several chunks: their last backwards interleave with other chunks'
  // earlier ones, which GradSync's one accumulation switch cannot follow, so every backward only
  // accumulates and finish() reduces all buckets after the schedule.
  if (s_.sync && per_micro_)
    s_.sync->prepare(true, a.micro > 0);
  else if (s_.sync && overlap_)
    s_.sync->prepare(a.micro == M_ - 1);
  const size_t c0 = timeline_->mark();
  if (v == K_ - 1)
    f.output.backward();
  else
    torch::autograd::backward({f.output}, {grad});
  chunk_sleep(split_backward_ ? 1 : 2);
  if (per_micro_) {  // zero3: this micro-batch's gradients reduce-scattered, every unit freed
    s_.sharding->after_backward();
    s_.sync->finish(deadline_);
  }
  const size_t c1 = timeline_->mark();
  if (v > 0 && stage_at(v - 1) == topo_.stage()) {
    handed_[tag(v - 1, a.micro, true)] = f.input.grad();
  } else if (v > 0) {
    const size_t s0 = timeline_->mark();
    channel_->send(f.input.grad(), stage_at(v - 1), tag(v - 1, a.micro, true));
    marked_.push_back({StageActivity::kSend, a.micro, v, stage_at(v - 1), s0, timeline_->mark()});
  }
  f = InFlight{};  // its activations go now
  marked_.push_back({StageActivity::kBackward, a.micro, a.chunk, -1, c0, c1});
}

void PipelineStep::backward_weight(const Action& a) {
  const size_t c0 = timeline_->mark();
  weight_grads_.compute(store_key(a));
  chunk_sleep(1);
  marked_.push_back({StageActivity::kBackwardWeight, a.micro, a.chunk, -1, c0, timeline_->mark()});
}

void PipelineStep::account_schedule(const std::vector<double>& ms, double origin_ms,
                                    PipelineStepTimes& t, std::vector<PipelineEvent>& events) {
  for (const MarkedSpan& m : marked_) {
    const double from = ms[m.from] - origin_ms, to = ms[m.to] - origin_ms, d = to - from;
    switch (m.activity) {
      case StageActivity::kForward:
      case StageActivity::kBackward:
      case StageActivity::kBackwardWeight: {
        const bool back = m.activity != StageActivity::kForward;
        (back ? t.backward_ms : t.forward_ms) += d;
        events.push_back({static_cast<int>(m.activity == StageActivity::kBackwardWeight) + back,
                          m.micro, m.chunk, from, to});
        trace(m.activity, m.micro, chunks_[m.chunk].virtual_stage, -1, from, to);
        break;
      }
      case StageActivity::kRecvWait:
        t.recv_wait_ms += d;
        trace(m.activity, m.micro, m.chunk, m.peer, from, to);
        break;
      default:
        t.send_wait_ms += d;
        trace(m.activity, m.micro, m.chunk, m.peer, from, to);
        break;
    }
  }
}

void PipelineStep::run_step(int step, StepRecord& rec, const FaultInjector& faults) {
  step_index_ = step;
  // host clock: the timeline's zero, before any work of the step (marks after it are device times)
  t_step_ = Clock::now();
  timeline_->begin(t_step_);
  marked_.clear();
  data_marks_.clear();
  deadline_ = Deadline::after_s(kWaitShareOfTimeout * o_.timeout_s);
  // Gradients are zeroed in place rather than freed, so that after the first step the memory a
  // step allocates is its activations (peak_activation_bytes), not the gradients' first
  // allocation. The values are the same: 0 + g is g. (zero2 drops them after the reduction.)
  s_.sharding->begin_step();
  for (auto& p : s_.params)
    if (p.grad().defined()) p.mutable_grad().detach_().zero_();
  loss_sum_ = torch::zeros({}, torch::TensorOptions().device(s_.device));
  if (s_.sync) s_.sync->prepare(false);
  PipelineStepTimes t;
  std::vector<PipelineEvent> events;
  // The stages start the schedule together: the span below is then the pipeline's flush time.
  // Stage 0's clock reading at the start is every stage's origin when they share its node (the
  // steady clock is the node's CLOCK_MONOTONIC), so timelines and the span compare across stages
  // even when a rank got the CPU late after the rendezvous; on another node, the reply's arrival.
  const torch::Tensor start = rendezvous(
      torch::zeros({1}, torch::kLong), kStartTag, "start-of-step exchange",
      [](const std::vector<torch::Tensor>&) {
        // host clock: stage 0's reading of the common start, outside any device work
        return torch::tensor({static_cast<int64_t>(Clock::now().time_since_epoch().count())},
                             torch::kLong);
      });
  const Clock::time_point first_origin(Clock::duration(start[0].item<int64_t>()));
  origin_ = same_node_as_first_ ? first_origin : Clock::now();  // host clock: the reply's arrival
  origin_first_us_ =
      std::chrono::duration<double, std::micro>(first_origin.time_since_epoch()).count();
  const double origin_ms = ms_between(t_step_, origin_);  // on the timeline
  run_peak_bytes_ = std::max(run_peak_bytes_, TensorMemory::peak_bytes(s_.ordinal));
  const int64_t base_bytes = TensorMemory::current_bytes(s_.ordinal);
  TensorMemory::reset_peak(s_.ordinal);
  for (const Action& a : actions_) {
    if (a.kind == ActionKind::kForward)
      forward(a);
    else if (a.kind == ActionKind::kBackwardWeight)
      backward_weight(a);
    else
      backward(a);  // whole, or a zero-bubble schedule's B
    channel_->poll();
  }
  // The schedule's times (on a GPU, once its kernels are done: the one wait of the step that
  // timing adds, just before the waits for the sends and the reductions).
  std::vector<double> ms = timeline_->read_ms();
  account_schedule(ms, origin_ms, t, events);
  const double last_end_ms = events.empty() ? 0 : events.back().end_ms;
  double data_ms = 0;
  for (const auto& [from, to] : data_marks_) data_ms += between_ms(ms, from, to);
  // Tensors on this stage's device held above the step's start, at their peak: the counting
  // allocator's on the CPU, the CUDA caching allocator's on a GPU.
  t.peak_activation_bytes = TensorMemory::peak_bytes(s_.ordinal) - base_bytes;
  run_peak_bytes_ = std::max(run_peak_bytes_, TensorMemory::peak_bytes(s_.ordinal));
  double host_waited = 0;
  const size_t w0 = timeline_->mark();
  channel_->wait_sends(deadline_, host_waited);
  const size_t w1 = timeline_->mark();
  if (scatter_) sum_tied_gradients();  // before the whole gradients go (see overlap_)
  if (s_.sync && !per_micro_) s_.sync->finish(deadline_);
  if (!scatter_) sum_tied_gradients();
  // fp16: this stage unscales its gradients and finds whether any is inf/NaN, agreed over its
  // data-parallel group as the data-parallel trainer does; the end-of-step exchange below takes
  // the maximum over the stages, so every rank of the job skips the same steps and updates the
  // same scale.
  const size_t sc0 = timeline_->mark();
  std::vector<torch::Tensor> grads = s_.sharding->grads();
  faults.after_reduction(step, grads);
  torch::Tensor found_inf = s_.scaler->unscale(grads);  // (1,) float, 0 when not fp16
  if (s_.scaler->enabled() && topo_.dp_size() > 1) s_.reducer->allreduce_max(found_inf);
  const size_t sc1 = timeline_->mark();
  // The span: from the common start to the last action's end on any stage of this pipeline; the
  // pipeline's loss, which its last stage computed; whether any stage found inf/NaN gradients.
  const double loss_here = loss_sum_.item<double>() / M_;
  const torch::Tensor end =
      rendezvous(torch::tensor({last_end_ms, loss_here, found_inf.item<double>()}, torch::kDouble),
                 kEndTag, "end-of-step exchange", [](const std::vector<torch::Tensor>& all) {
                   torch::Tensor r = all.back().clone();  // the last stage's loss
                   for (const auto& x : all)
                     for (int i : {0, 2}) r[i] = std::max(r[i].item<double>(), x[i].item<double>());
                   return r;
                 });
  t.span_ms = end[0].item<double>();
  const size_t opt0 = timeline_->mark();
  if (s_.scaler->enabled()) {
    rec.skipped = end[2].item<double>() != 0;
    s_.scaler->update(torch::full_like(found_inf, rec.skipped ? 1.0 : 0.0));
  }
  if (!rec.skipped) s_.sharding->step();
  const size_t opt1 = timeline_->mark();
  // zero1, zero2: the updated shards gathered over the stage's data-parallel group (exposed).
  if (!rec.skipped) s_.sharding->gather();
  const size_t g1 = timeline_->mark();
  ms = timeline_->read_ms();
  t.send_wait_ms += between_ms(ms, w0, w1);
  trace(StageActivity::kSendWait, -1, 0, -1, ms[w0] - origin_ms, ms[w1] - origin_ms);
  const double scaler_ms = between_ms(ms, sc0, sc1);
  t.bubble = t.span_ms > 0 ? 1 - (t.forward_ms + t.backward_ms) / t.span_ms : 0;
  rec.phases.fill(0);
  rec.phases[static_cast<size_t>(Phase::kData)] = data_ms;
  rec.phases[static_cast<size_t>(Phase::kForward)] = t.forward_ms;
  rec.phases[static_cast<size_t>(Phase::kBackward)] = t.backward_ms;
  rec.phases[static_cast<size_t>(Phase::kScaler)] = scaler_ms;
  // Exposed communication: everything of the step that was not loading, compute, the scaler or
  // the optimizer.
  rec.phases[static_cast<size_t>(Phase::kComm)] =
      ms[opt0] - data_ms - t.forward_ms - t.backward_ms - scaler_ms + between_ms(ms, opt1, g1);
  rec.phases[static_cast<size_t>(Phase::kOptimizer)] = between_ms(ms, opt0, opt1);
  rec.total_ms = ms[g1];
  rec.loss = end[1].item<double>();  // every stage records its pipeline's loss
  t.loss_scale = rec.loss_scale;
  t.found_inf = found_inf.item<float>() != 0;
  t.skipped = rec.skipped;
  stats_.steps.push_back(t);
  stats_.timeline = std::move(events);
  s_.sharding->end_step();
}

void PipelineStep::finish(TrainOutcome& out) {
  double waited_ms = 0;  // the last step's answers from stage 0, taken by now or soon
  channel_->wait_sends(Deadline::after_s(o_.timeout_s), waited_ms);
  s_.sharding->finish(out);
  account_gradients(s_, out);
  // --data: stage 0 loaded; the other stages' rows count nothing (the data reached them as
  // activations and targets).
  out.data = s_.data ? s_.data->summary()
                     : DataSummary{"--data " + o_.data + " (via stage 0)", 0, 0, 0, 0, 0, 0, 0, 0};
  out.memory_source = TensorMemory::source(s_.ordinal);
  out.peak_memory_bytes = std::max(run_peak_bytes_, TensorMemory::peak_bytes(s_.ordinal));
  out.peak_reserved_bytes =
      std::max(out.peak_memory_bytes, TensorMemory::peak_reserved_bytes(s_.ordinal));
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  out.peak_rss_bytes = static_cast<int64_t>(u.ru_maxrss) * 1024;
  if (!o_.dump_path.empty() && topo_.dp_index() == 0) {
    // --debug-dump: each stage's first data-parallel rank writes its parameters and gradients.
    models::TensorMap dump;
    for (size_t i = 0; i < s_.params.size(); ++i) {
      dump["param." + param_names_[i]] = s_.params[i].detach().to(torch::kCPU).contiguous();
      if (s_.params[i].grad().defined())
        dump["grad." + param_names_[i]] = s_.params[i].grad().to(torch::kCPU).contiguous();
      if (!s_.master.empty())
        dump["master." + param_names_[i]] = s_.master[i].detach().to(torch::kCPU);
    }
    const DeviceMesh& mesh = *s_.mesh;  // with tensor parallelism, each tp coordinate's slices
    const std::string tp = mesh.degree(MeshAxis::kTp) > 1
                               ? ".tp" + std::to_string(mesh.coord(MeshAxis::kTp))
                               : std::string();
    models::write_tensors(o_.dump_path + ".stage" + std::to_string(topo_.stage()) + tp, dump);
  }
  monitor_.watch_mode(nullptr);
  out.mode = results_;
}

}  // namespace

std::unique_ptr<StepStrategy> build_pipeline(TrainSetup& s, const RunContext& ctx,
                                             RunMonitor& monitor) {
  return std::make_unique<PipelineStep>(s, ctx, monitor);
}

}  // namespace dtune::train
