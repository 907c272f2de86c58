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
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_reduce_sum(torch::Tensor& t) override { reduce(t, MPI_SUM); }
  void all_reduce_max(torch::Tensor& t) override { reduce(t, MPI_MAX); }
  Traffic take_traffic() override {
    Traffic out = traffic_;
    traffic_ = {};
    return out;
  }

 private:
  void reduce(torch::Tensor& t, MPI_Op op) {
    const auto start = std::chrono::steady_clock::now();
    traffic_.bytes += static_cast<int64_t>(t.numel() * t.element_size());
    const bool narrow = t.scalar_type() == torch::kHalf || t.scalar_type() == torch::kBFloat16;
    torch::Tensor host = t.device().is_cpu() && !narrow
                             ? t
                             : t.to(torch::kCPU, narrow ? torch::kFloat : t.scalar_type());
    host = host.contiguous();
    MPI_Datatype type = host.scalar_type() == torch::kDouble ? MPI_DOUBLE : MPI_FLOAT;
    DTUNE_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, host.data_ptr(), static_cast<int>(host.numel()),
                                  type, op, comm_));
    if (!host.is_same(t)) t.copy_(host);
    traffic_.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  MPI_Comm comm_;
  int size_ = 1, rank_ = 0;
  Traffic traffic_;
};

}  // namespace

std::shared_ptr<models::TpGroup> make_mpi_tp_group(MPI_Comm comm) {
  return std::make_shared<MpiTpGroup>(comm);
}

}  // namespace dtune::train
