// The NCCL stage channel (--backend nccl --device cuda): activations and their gradients go from
// GPU to GPU with ncclSend/ncclRecv, on CUDA streams of their own that the compute stream
// (LibTorch's current stream) orders with events, so a send overlaps the stage's next forward or
// backward.
//
// Links. Every direction of every edge between neighbouring stages is its own two-rank NCCL
// communicator with its own stream: edge e joins stage e and stage e + 1 (mod P: the wrap edge
// P - 1 -> 0 exists for interleaved chunks, and carries the end stages' tied-gradient exchange);
// its "activation" link carries even tags from e to e + 1, its "gradient" link odd tags from e + 1
// to e. One communicator per direction because NCCL serialises all work of one communicator,
// whatever stream it is issued on (src/enqueue.cc: every launch first waits for the
// communicator's deviceStream): a send whose receiver is not ready yet would hold back a receive
// from the same neighbour, coupling the two directions into a possible deadlock that MPI's
// buffered sends never had. With one link per direction each stream is a FIFO of sends at one end
// and of receives at the other; NCCL matches the i-th send with the i-th receive, so each link's
// sends must be issued in the order its receiver asks for them: true of every schedule (the
// ordering test in tests/unit/train/test_pipeline_parts.cc), and checked at run time by a
// sequence number in each transfer's header (a mismatch is an Error, never a wrong tensor).
//
// Headers over MPI. Each transfer's dtype and shape (and route and sequence number) go ahead as
// one 96-byte MPI message on a duplicate of the pipeline communicator, tagged as the transfer. The
// shapes are known in principle (fixed per edge for a fixed batch), but a header keeps the
// channel free of the runner's shapes (real data with a short last batch, any model's pieces),
// makes the receive's first wait one that names the missing stage while nothing is in NCCL yet,
// and costs one eager message of a few microseconds beside an activation of kilobytes to
// megabytes. Host tensors (the runner's control messages) and any pair without a link travel over
// the MPI channel (p2p.h) after the same header.
//
// Waits. A receive blocks the caller until its tensor is on this GPU, as the MPI channel's does:
// every wait of the step is then one that names whom it waits for, and no later synchronising
// call (a .item(), an allocation) can hang on an unfinished receive without a deadline. The wait
// polls cudaStreamQuery and ncclCommGetAsyncError against the deadline and aborts the link's
// communicator when it passes (NcclComm::wait; NCCL operations cannot be cancelled otherwise).
// Sends never block the caller; wait_sends() waits for them the same way.
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <array>
#include <cstdlib>
#include <deque>
#include <thread>
#include <vector>

#include "core/cuda/cuda_error.h"
#include "core/cuda/cuda_handles.h"
#include "core/cuda/nccl_comm.h"
#include "core/error.h"
#include "train/pipeline/p2p.h"
#include "train/pipeline/pipeline_channel.h"

namespace dtune::train {
namespace {

constexpr int kMaxDims = 8;
enum : int64_t { kRouteMpi = 0, kRouteNccl = 1 };
// route, sequence number on its link, dtype, ndim, dims.
using Header = std::array<int64_t, 4 + kMaxDims>;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// One way between two neighbouring stages.
struct Link {
  NcclComm comm;  // two ranks
  CudaStream stream;
  CudaEvent ready;  // recorded on the compute stream; the link's stream waits for it
  int peer = 0;     // the other stage's NCCL rank in comm (0 or 1)
  int peer_stage = 0;
  size_t index = 0;   // in links_
  int64_t count = 0;  // transfers sent (at the sender) or received (at the receiver) so far
};

struct InFlight {
  torch::Tensor payload;  // kept alive until NCCL has read it
  CudaEvent done;         // recorded on the link's stream after the send
};

class NcclStageChannel final : public PipelineChannel {
 public:
  NcclStageChannel(const Options& o, const PipelineTopology& topo, int device, bool swap_ends);
  // Links go in the order they were made (the same on every rank).
  ~NcclStageChannel() override {
    for (auto& l : links_) l.reset();
  }
  std::string name() const override { return "nccl"; }
  void send(const torch::Tensor& t, int stage, int tag) override;
  torch::Tensor recv(int stage, int tag, const torch::Device& device, const Deadline& deadline,
                     const std::string& what, double& waited_ms) override;
  torch::Tensor exchange(const torch::Tensor& mine, int stage, int tag, const Deadline& deadline,
                         const std::string& what, double& waited_ms) override;
  void poll() override;
  void wait_sends(const Deadline& deadline, double& waited_ms) override;

 private:
  struct HeaderSend {
    Header header{};
    MPI_Request request = MPI_REQUEST_NULL;
  };
  // The link a transfer under `tag` to (from) `stage` takes, or nullptr (over MPI).
  Link* out_link(int stage, int tag) const;
  Link* in_link(int stage, int tag) const;
  Link* make_link(MPI_Comm pair, int sender, int peer_stage);
  void wait_header(MPI_Request& r, int stage, const Deadline& deadline, const std::string& what);
  cudaStream_t compute() const { return c10::cuda::getCurrentCUDAStream(device_).stream(); }
  // "pipeline stage 1 waiting for stage 2 (rank 5)'s gradient of micro-batch 3".
  std::string waiting(int stage, const std::string& what) const {
    return "pipeline stage " + std::to_string(topo_.stage()) + " waiting for " +
           topo_.describe(stage) + "'s " + what;
  }

  const PipelineTopology& topo_;
  int device_;
  double timeout_s_;
  StageChannel host_;  // host tensors, and pairs without a link
  MpiComm headers_;
  std::vector<std::unique_ptr<Link>> links_;  // in the order made
  Link *act_out_ = nullptr, *act_in_ = nullptr, *grad_out_ = nullptr, *grad_in_ = nullptr;
  Link* ends_ = nullptr;                         // stage 0 <-> stage P - 1, both ways: exchange()
  std::vector<std::deque<InFlight>> in_flight_;  // per link, in the order sent
  std::deque<HeaderSend> header_sends_;          // a deque: MPI holds the headers' addresses
  std::vector<CudaEvent> spare_events_;
};

NcclStageChannel::NcclStageChannel(const Options& o, const PipelineTopology& topo, int device,
                                   bool swap_ends)
    : topo_(topo), device_(device), timeout_s_(o.timeout_s), host_(topo) {
  headers_ = MpiComm::dup(topo.pipe());
  const int P = topo.stages(), s = topo.stage();
  const bool wrap = o.pipeline.schedule == Schedule::kInterleaved && o.pipeline.virtual_stages > 1;
  MPI_Group all = MPI_GROUP_NULL;
  DTUNE_MPI_CHECK(MPI_Comm_group(topo.pipe(), &all));
  // Edge e joins stages e and e + 1 mod P. Every rank makes the edges it is on in increasing e
  // (each creation waits for both ranks), so no two ranks can wait for each other in a cycle.
  for (int e = 0; e < P; ++e) {
    const int a = e, b = (e + 1) % P;
    const bool last = e == P - 1;
    const bool carries = !last || wrap, tied = last && swap_ends;
    if ((s != a && s != b) || !(carries || tied)) continue;
    const std::array<int, 2> ranks{a, b};
    MPI_Group pair_group = MPI_GROUP_NULL;
    DTUNE_MPI_CHECK(MPI_Group_incl(all, 2, ranks.data(), &pair_group));
    MPI_Comm c = MPI_COMM_NULL;
    DTUNE_MPI_CHECK(MPI_Comm_create_group(topo.pipe(), pair_group, e, &c));
    DTUNE_MPI_CHECK(MPI_Group_free(&pair_group));
    MpiComm pair(c);  // a's rank is 0, b's 1
    if (carries) {
      Link* act = make_link(pair.get(), 0, s == a ? b : a);
      Link* grad = make_link(pair.get(), 1, s == a ? b : a);
      // P = 2: both edges join the same two stages; the directions still differ.
      if (s == a) act_out_ = act, grad_in_ = grad;
      if (s == b) act_in_ = act, grad_out_ = grad;
    }
    if (tied) ends_ = make_link(pair.get(), -1, s == a ? b : a);
  }
  DTUNE_MPI_CHECK(MPI_Group_free(&all));
  in_flight_.resize(links_.size());
}

// A communicator over `pair` and its stream, connected by one transfer from `sender` (0 or 1; -1:
// both ways), so that NCCL's lazy connection set-up happens here rather than in the first step.
Link* NcclStageChannel::make_link(MPI_Comm pair, int sender, int peer_stage) {
  const auto deadline = Deadline::after_s(timeout_s_);
  auto l = std::make_unique<Link>();
  l->comm = NcclComm::create(pair);  // under the set-up's armed watchdog
  l->stream = CudaStream::create();
  l->ready = CudaEvent::create(EventTiming::kDisabled);
  l->peer = 1 - l->comm.rank();
  l->peer_stage = peer_stage;
  l->index = links_.size();
  torch::Tensor probe =
      torch::zeros({2}, torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA, device_));
  l->ready.record(compute());
  DTUNE_CUDA_CHECK(cudaStreamWaitEvent(l->stream.get(), l->ready.get(), 0));
  DTUNE_NCCL_CHECK(ncclGroupStart());
  if (sender < 0 || sender == l->comm.rank())
    DTUNE_NCCL_SETTLE(
        l->comm, ncclSend(probe.data_ptr(), 1, ncclUint8, l->peer, l->comm.get(), l->stream.get()),
        deadline.at());
  if (sender < 0 || sender != l->comm.rank())
    DTUNE_NCCL_SETTLE(l->comm,
                      ncclRecv(static_cast<uint8_t*>(probe.data_ptr()) + 1, 1, ncclUint8, l->peer,
                               l->comm.get(), l->stream.get()),
                      deadline.at());
  DTUNE_NCCL_SETTLE(l->comm, ncclGroupEnd(), deadline.at());
  l->comm.wait(l->stream.get(), deadline.at(),
               "the first transfer on a new pipeline link (its other stage did not connect)");
  links_.push_back(std::move(l));
  return links_.back().get();
}

Link* NcclStageChannel::out_link(int stage, int tag) const {
  const int P = topo_.stages(), s = topo_.stage();
  if (tag % 2 == 0) return stage == (s + 1) % P ? act_out_ : nullptr;
  return stage == (s + P - 1) % P ? grad_out_ : nullptr;
}

Link* NcclStageChannel::in_link(int stage, int tag) const {
  const int P = topo_.stages(), s = topo_.stage();
  if (tag % 2 == 0) return stage == (s + P - 1) % P ? act_in_ : nullptr;
  return stage == (s + 1) % P ? grad_in_ : nullptr;
}

void NcclStageChannel::send(const torch::Tensor& t, int stage, int tag) {
  Link* l = t.is_cuda() ? out_link(stage, tag) : nullptr;
  HeaderSend& h = header_sends_.emplace_back();
  h.header.fill(0);
  h.header[0] = l ? kRouteNccl : kRouteMpi;
  if (l) {
    DTUNE_CHECK(t.dim() <= kMaxDims, "pipeline: tensor of more than 8 dimensions");
    DTUNE_CHECK(t.device().index() == device_, "pipeline: NCCL send of a tensor on another GPU");
    InFlight f;
    f.payload = t.detach().contiguous();  // a copy (on the compute stream) only if strided
    h.header[1] = l->count++;
    h.header[2] = static_cast<int64_t>(f.payload.scalar_type());
    h.header[3] = f.payload.dim();
    for (int64_t d = 0; d < f.payload.dim(); ++d) h.header[4 + d] = f.payload.size(d);
    // The link's stream starts the send once the compute stream has produced the tensor.
    l->ready.record(compute());
    DTUNE_CUDA_CHECK(cudaStreamWaitEvent(l->stream.get(), l->ready.get(), 0));
    // Bytes: a point-to-point transfer converts and reduces nothing, so every dtype (bf16 and fp16
    // included) moves as its bytes, and the receiver reads the dtype from the header.
    const size_t bytes = f.payload.numel() * f.payload.element_size();
    DTUNE_NCCL_SETTLE(
        l->comm,
        ncclSend(f.payload.data_ptr(), bytes, ncclUint8, l->peer, l->comm.get(), l->stream.get()),
        Deadline::after_s(timeout_s_).at());
    if (spare_events_.empty()) {
      f.done = CudaEvent::create(EventTiming::kDisabled);
    } else {
      f.done = std::move(spare_events_.back());
      spare_events_.pop_back();
    }
    f.done.record(l->stream.get());
    in_flight_[l->index].push_back(std::move(f));
  }
  DTUNE_MPI_CHECK(MPI_Isend(h.header.data(), static_cast<int>(h.header.size()), MPI_INT64_T, stage,
                            tag, headers_.get(), &h.request));
  if (!l) host_.send(t, stage, tag);
}

void NcclStageChannel::wait_header(MPI_Request& r, int stage, const Deadline& deadline,
                                   const std::string& what) {
  // As the MPI channel's waits: spin briefly, then sleep between polls, doubling up to 500 us.
  auto sleep = std::chrono::microseconds(20);
  for (int polls = 0;; ++polls) {
    int done = 0;
    DTUNE_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if ((polls & 63) == 0) {
      poll();
      if (deadline.expired())
        throw TimeoutError(waiting(stage, what) + " passed its deadline (--timeout): that stage " +
                           "stopped, died or is stuck behind another");
    }
    if (polls < 64) continue;
    std::this_thread::sleep_for(sleep);
    sleep = std::min(std::chrono::microseconds(500), sleep * 2);
  }
}

torch::Tensor NcclStageChannel::recv(int stage, int tag, const torch::Device& device,
                                     const Deadline& deadline, const std::string& what,
                                     double& waited_ms) {
  const auto t0 = Clock::now();
  Header h{};
  MPI_Request r = MPI_REQUEST_NULL;
  DTUNE_MPI_CHECK(
      MPI_Irecv(h.data(), static_cast<int>(h.size()), MPI_INT64_T, stage, tag, headers_.get(), &r));
  wait_header(r, stage, deadline, what);
  if (h[0] == kRouteMpi) {
    double waited = 0;
    torch::Tensor t = host_.recv(stage, tag, device, deadline, what, waited);
    waited_ms += ms_since(t0);
    return t;
  }
  Link* l = in_link(stage, tag);
  DTUNE_CHECK(l != nullptr, "pipeline (NCCL): " + topo_.describe(stage) + " sent " + what +
                                " over a link this stage does not have (tag " +
                                std::to_string(tag) + ")");
  DTUNE_CHECK(h[1] == l->count, "pipeline (NCCL): " + topo_.describe(stage) +
                                    " sent its transfer " + std::to_string(h[1]) +
                                    " on this link where stage " + std::to_string(topo_.stage()) +
                                    " expected transfer " + std::to_string(l->count) + " (" + what +
                                    "): the schedule's send and receive orders differ");
  ++l->count;
  std::vector<int64_t> shape(h.begin() + 4, h.begin() + 4 + h[3]);
  torch::Tensor t = torch::empty(shape, torch::TensorOptions()
                                            .dtype(static_cast<torch::ScalarType>(h[2]))
                                            .device(torch::kCUDA, device_));
  // The new tensor's memory may still be read by earlier kernels of the compute stream (the
  // caching allocator reuses blocks in that stream's order): the receive waits for them.
  l->ready.record(compute());
  DTUNE_CUDA_CHECK(cudaStreamWaitEvent(l->stream.get(), l->ready.get(), 0));
  const size_t bytes = t.numel() * t.element_size();
  DTUNE_NCCL_SETTLE(
      l->comm, ncclRecv(t.data_ptr(), bytes, ncclUint8, l->peer, l->comm.get(), l->stream.get()),
      deadline.at());
  // Only receives of this link are on its stream, each waited for here: the stream is idle when
  // this one is done.
  l->comm.wait(l->stream.get(), deadline.at(), waiting(stage, what));
  // Formally ordered after the receive (done by now); the allocator may reuse t's memory only
  // after the link's stream too.
  l->ready.record(l->stream.get());
  DTUNE_CUDA_CHECK(cudaStreamWaitEvent(compute(), l->ready.get(), 0));
  t.record_stream(c10::cuda::getStreamFromExternal(l->stream.get(), device_));
  waited_ms += ms_since(t0);
  return t.to(device);
}

torch::Tensor NcclStageChannel::exchange(const torch::Tensor& mine, int stage, int tag,
                                         const Deadline& deadline, const std::string& what,
                                         double& waited_ms) {
  const int other = topo_.first() ? topo_.stages() - 1 : 0;
  if (ends_ == nullptr || !mine.is_cuda() || stage != other || !(topo_.first() || topo_.last()))
    return PipelineChannel::exchange(mine, stage, tag, deadline, what, waited_ms);
  const auto t0 = Clock::now();
  torch::Tensor src = mine.detach().contiguous();
  torch::Tensor theirs = torch::empty_like(src);
  Link* l = ends_;
  l->ready.record(compute());
  DTUNE_CUDA_CHECK(cudaStreamWaitEvent(l->stream.get(), l->ready.get(), 0));
  const size_t bytes = src.numel() * src.element_size();
  // Each end sends and receives in the same phase: one group, or each would wait in its send for
  // the other's receive (NCCL's rule for concurrent point-to-point operations).
  DTUNE_NCCL_CHECK(ncclGroupStart());
  DTUNE_NCCL_SETTLE(
      l->comm, ncclSend(src.data_ptr(), bytes, ncclUint8, l->peer, l->comm.get(), l->stream.get()),
      deadline.at());
  DTUNE_NCCL_SETTLE(
      l->comm,
      ncclRecv(theirs.data_ptr(), bytes, ncclUint8, l->peer, l->comm.get(), l->stream.get()),
      deadline.at());
  DTUNE_NCCL_SETTLE(l->comm, ncclGroupEnd(), deadline.at());
  l->comm.wait(l->stream.get(), deadline.at(), waiting(stage, what));
  l->ready.record(l->stream.get());
  DTUNE_CUDA_CHECK(cudaStreamWaitEvent(compute(), l->ready.get(), 0));
  const auto link_stream = c10::cuda::getStreamFromExternal(l->stream.get(), device_);
  src.record_stream(link_stream);
  theirs.record_stream(link_stream);
  waited_ms += ms_since(t0);
  return theirs;  // (no tag on the link: both ends swap the tied tensors in the same order)
}

void NcclStageChannel::poll() {
  for (auto& q : in_flight_) {
    while (!q.empty() && q.front().done.done()) {
      spare_events_.push_back(std::move(q.front().done));
      q.pop_front();  // the payload's last reference here: its memory may be reused
    }
  }
  while (!header_sends_.empty()) {
    int done = 0;
    DTUNE_MPI_CHECK(MPI_Test(&header_sends_.front().request, &done, MPI_STATUS_IGNORE));
    if (!done) break;
    header_sends_.pop_front();
  }
  host_.poll();
}

void NcclStageChannel::wait_sends(const Deadline& deadline, double& waited_ms) {
  const auto t0 = Clock::now();
  for (size_t i = 0; i < links_.size(); ++i) {
    if (in_flight_[i].empty()) continue;
    // The link's stream holds only its sends: idle means every one was taken.
    links_[i]->comm.wait(links_[i]->stream.get(), deadline.at(),
                         topo_.describe(links_[i]->peer_stage) + " to take what pipeline stage " +
                             std::to_string(topo_.stage()) +
                             " sent (that stage stopped, died or is stuck behind another)");
  }
  poll();
  auto sleep = std::chrono::microseconds(20);
  while (!header_sends_.empty()) {
    poll();
    if (header_sends_.empty()) break;
    if (deadline.expired())
      throw TimeoutError("pipeline stage " + std::to_string(topo_.stage()) +
                         " waited past its deadline (--timeout) for a neighbour to take a " +
                         "transfer's header: that stage stopped, died or is stuck");
    std::this_thread::sleep_for(sleep);
    sleep = std::min(std::chrono::microseconds(500), sleep * 2);
  }
  double host_waited = 0;
  host_.wait_sends(deadline, host_waited);
  waited_ms += ms_since(t0);
}

// NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU detected", before 2.30;
// 2.30 allows it with NCCL_MULTI_RANK_GPU_ENABLE=1): say so as bad input, on every rank alike,
// before any communicator waits for a peer that will fail.
void check_one_gpu_per_rank(const RunContext& ctx, const PipelineTopology& topo, int device) {
  int version = 0;
  DTUNE_NCCL_CHECK(ncclGetVersion(&version));
  const char* multi = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  if (version >= 23000 && multi != nullptr && std::string(multi) == "1") return;
  const int world = ctx.world_size(), P = topo.stages();
  std::vector<int> mine{ctx.node(), device}, all(2 * static_cast<size_t>(world));
  DTUNE_MPI_CHECK(MPI_Allgather(mine.data(), 2, MPI_INT, all.data(), 2, MPI_INT, ctx.comm()));
  for (int i = 0; i < world; ++i)
    for (int j = i + 1; j < world; ++j) {
      if (all[2 * i] != all[2 * j] || all[2 * i + 1] != all[2 * j + 1]) continue;
      const MeshShape& mesh = topo.mesh().shape();
      const auto a = mesh.coords(i), b = mesh.coords(j);
      const bool one_pipeline =
          a[static_cast<size_t>(MeshAxis::kDp)] == b[static_cast<size_t>(MeshAxis::kDp)];
      if (!one_pipeline &&
          a[static_cast<size_t>(MeshAxis::kPp)] != b[static_cast<size_t>(MeshAxis::kPp)])
        continue;
      throw UsageError(
          "--backend nccl with --pipeline-stages " + std::to_string(P) + ": ranks " +
          std::to_string(i) + " and " + std::to_string(j) + " (" +
          (one_pipeline ? "stages of one pipeline" : "one stage's data-parallel group") +
          ") share GPU " + std::to_string(all[2 * i + 1]) + " on " +
          ctx.node_host()[static_cast<size_t>(all[2 * i])] + ", and NCCL " + nccl_version_string() +
          " does not connect two ranks of one communicator on one GPU: launch one rank per GPU, "
          "or use --backend mpi (tensors staged through host memory)");
    }
}

}  // namespace

std::unique_ptr<PipelineChannel> make_nccl_stage_channel(const Options& o, const RunContext& ctx,
                                                         const PipelineTopology& topo, int device,
                                                         bool swap_ends) {
  DTUNE_CHECK(device >= 0, "--backend nccl with --pipeline-stages needs --device cuda");
  check_one_gpu_per_rank(ctx, topo, device);
  // Every stage's GPU has several communicators in flight at once (a link per direction and
  // neighbour, and with data parallelism its stage group's reducer). NCCL's guide ("Using multiple
  // NCCL communicators concurrently") warns that operations of several communicators on one device
  // can deadlock unless every rank issues them in one order and each device runs them in that
  // order. The schedules issue one order on every rank of a stage group (the ordering test in
  // tests/unit/train/test_pipeline_parts.cc), and NCCL_LAUNCH_ORDER_IMPLICIT=1 (NCCL 2.26+, CUDA
  // 12.3+: src/enqueue.cc getImplicitOrder) makes each device launch NCCL's kernels in the order
  // the host issued them. Set here, before the first communicator, unless the user set it.
  setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", 0);
  return std::make_unique<NcclStageChannel>(o, topo, device, swap_ends);
}

}  // namespace dtune::train
