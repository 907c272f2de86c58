// nccl-tests bandwidth formulas.
#include "benchmarks/comm/bandwidth.h"

namespace dtune::comm {

double busbw_factor(Collective c, int nranks) {
  const double n = nranks;
  switch (c) {
    case Collective::kAllreduce: return 2.0 * (n - 1) / n;
    case Collective::kReduceScatter:
    case Collective::kAllgather:
    case Collective::kAlltoall: return (n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendrecv: return 1.0;
  }
  return 1.0;
}

double algbw_gbps(double bytes, double time_us) {
  return time_us > 0 ? bytes / (time_us * 1e-6) / 1e9 : 0.0;
}

double busbw_gbps(Collective c, int nranks, double bytes, double time_us) {
  return algbw_gbps(bytes, time_us) * busbw_factor(c, nranks);
}

}  // namespace dtune::comm
