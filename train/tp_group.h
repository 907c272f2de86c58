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

}  // namespace dtune::train
