// The tensor-parallel group over MPI: the mesh's tp-axis communicator behind models::TpGroup
// (models/tensor_parallel.h). Blocking MPI_Allreduce on host memory: a CPU tensor in place; a GPU
// one through a host copy (correct, not fast: NCCL's group is for GPUs). fp16/bf16 are reduced in
// fp32 (MPI has no such types) and rounded back, as NCCL's sum of them rounds once per step.
#pragma once

#include <mpi.h>

#include <memory>

#include "models/tensor_parallel.h"

namespace dtune::train {

std::shared_ptr<models::TpGroup> make_mpi_tp_group(MPI_Comm comm);
// What a batch-finder probe (setup.h's RunMode::kProbe: one rank alone) splits the model with: rank
// 0 of a group of `size`, each collective's buffers allocated as the group's own are, nothing sent.
// A rank's shapes are the same at every tp rank, so its memory is any tp rank's.
std::shared_ptr<models::TpGroup> make_probe_tp_group(int size);

}  // namespace dtune::train
