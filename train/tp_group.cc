// The MPI tensor-parallel group (tp_group.h).
#include "train/tp_group.h"

#include <chrono>

#include "core/error.h"

namespace dtune::train {
namespace {

class MpiTpGroup final : public models::TpGroup {
 public:
  explicit MpiTpGroup(MPI_Comm comm) : comm_(comm) {
    DTUNE_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    DTUNE_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  }
  // Rank 0 of a group of `size` alone: every collective's buffers as above, its communication left
  // out (an all-gather repeats this rank's part, a reduce-scatter keeps it, an all-reduce keeps the
  // tensor), so a rank's memory is what it would be in the group.
  static std::shared_ptr<MpiTpGroup> alone(int size) {
    auto g = std::make_shared<MpiTpGroup>(MPI_COMM_SELF);
    g->size_ = size;
    g->alone_ = true;
    return g;
  }
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_reduce_sum(torch::Tensor& t) override { reduce(t, MPI_SUM); }
  void all_reduce_max(torch::Tensor& t) override { reduce(t, MPI_MAX); }
  torch::Tensor all_gather(const torch::Tensor& t, int64_t dim) override {
    const auto start = std::chrono::steady_clock::now();
    const torch::Tensor host = to_host(t);
    std::vector<int64_t> shape = host.sizes().vec();
    shape.insert(shape.begin(), size_);
    torch::Tensor all = torch::empty(shape, host.options());  // (size, ...) in rank order
    const int n = static_cast<int>(host.numel());
    if (alone_)
      all.copy_(host.unsqueeze(0).expand_as(all));
    else
      DTUNE_MPI_CHECK(MPI_Allgather(host.data_ptr(), n, type_of(host), all.data_ptr(), n,
                                    type_of(host), comm_));
    torch::Tensor out = torch::cat(all.unbind(0), dim).to(t.device(), t.scalar_type());
    count(out.numel() * t.element_size(), start);
    return out;
  }
  torch::Tensor reduce_scatter(const torch::Tensor& t, int64_t dim) override {
    const auto start = std::chrono::steady_clock::now();
    if (t.size(dim) % size_ != 0)
      throw UsageError("sequence parallelism: a length of " + std::to_string(t.size(dim)) +
                       " does not split over " + std::to_string(size_) +
                       " tensor-parallel ranks (give --context a multiple of --tp)");
    const torch::Tensor parts = torch::stack(to_host(t).chunk(size_, dim)).contiguous();
    torch::Tensor mine = torch::empty(parts[0].sizes(), parts.options());
    if (alone_)
      mine.copy_(parts[0]);
    else
      DTUNE_MPI_CHECK(MPI_Reduce_scatter_block(parts.data_ptr(), mine.data_ptr(),
                                               static_cast<int>(mine.numel()), type_of(parts),
                                               MPI_SUM, comm_));
    count(t.numel() * t.element_size(), start);
    return mine.to(t.device(), t.scalar_type());
  }
  Traffic take_traffic() override {
    Traffic out = traffic_;
    traffic_ = {};
    return out;
  }

 private:
  // fp16/bf16 in fp32 (MPI has no such types), a GPU tensor through the host; contiguous.
  static torch::Tensor to_host(const torch::Tensor& t) {
    const bool narrow = t.scalar_type() == torch::kHalf || t.scalar_type() == torch::kBFloat16;
    return t.to(torch::kCPU, narrow ? torch::kFloat : t.scalar_type()).contiguous();
  }
  static MPI_Datatype type_of(const torch::Tensor& host) {
    return host.scalar_type() == torch::kDouble ? MPI_DOUBLE : MPI_FLOAT;
  }
  void count(int64_t bytes, std::chrono::steady_clock::time_point start) {
    traffic_.add(site(), bytes,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  void reduce(torch::Tensor& t, MPI_Op op) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t bytes = static_cast<int64_t>(t.numel() * t.element_size());
    const bool narrow = t.scalar_type() == torch::kHalf || t.scalar_type() == torch::kBFloat16;
    torch::Tensor host = t.device().is_cpu() && !narrow
                             ? t
                             : t.to(torch::kCPU, narrow ? torch::kFloat : t.scalar_type());
    host = host.contiguous();
    MPI_Datatype type = host.scalar_type() == torch::kDouble ? MPI_DOUBLE : MPI_FLOAT;
    if (!alone_)
      DTUNE_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, host.data_ptr(), static_cast<int>(host.numel()),
                                    type, op, comm_));
    if (!host.is_same(t)) t.copy_(host);
    count(bytes, start);
  }
  MPI_Comm comm_;
  int size_ = 1, rank_ = 0;
  bool alone_ = false;  // alone(): no communication
  Traffic traffic_;
};

}  // namespace

std::shared_ptr<models::TpGroup> make_mpi_tp_group(MPI_Comm comm) {
  return std::make_shared<MpiTpGroup>(comm);
}

std::shared_ptr<models::TpGroup> make_probe_tp_group(int size) { return MpiTpGroup::alone(size); }

}  // namespace dtune::train
