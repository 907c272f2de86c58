// Algorithm and bus bandwidth exactly as nccl-tests defines them (its doc/PERFORMANCE.md and the
// src/*.cu GetBw functions; our derivation is doc/metrics.md), one function per formula so each is
// unit-tested:
//   algbw = S / t  (GB/s = 1e9 B/s), S the size column (OpShape::bytes)
//   busbw = algbw × factor(collective, n), the factor from the collective's row (collectives.cc):
//     allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall (n-1)/n;
//     broadcast, reduce, sendrecv 1.
// The factor makes busbw comparable with the hardware's link bandwidth whatever n is: e.g. a ring
// allreduce moves 2(n-1)/n × S bytes through each rank's link.
#pragma once

#include <cstddef>

#include "benchmarks/comm/types.h"

namespace dtune::comm {

double busbw_factor(Collective c, int nranks);
// S / t in GB/s for t in microseconds: bytes / (t × 1e-6) / 1e9.
double algbw_gbps(double bytes, double time_us);
double busbw_gbps(Collective c, int nranks, double bytes, double time_us);

}  // namespace dtune::comm
