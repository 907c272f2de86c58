// Algorithm and bus bandwidth exactly as nccl-tests defines them (doc/PERFORMANCE.md and its
// src/*.cu GetBw functions), one function per formula so each is unit-tested:
//   algbw = S / t  (GB/s = 1e9 B/s), S as listed per collective in ../shared/REFERENCE.md
//   busbw = algbw × factor(collective, n):
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
