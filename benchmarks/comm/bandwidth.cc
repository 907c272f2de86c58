// nccl-tests bandwidth formulas.
#include "benchmarks/comm/bandwidth.h"

#include "benchmarks/comm/collectives.h"

namespace dtune::comm {

double busbw_factor(Collective c, int nranks) {
  return collective_spec(c).busbw_factor(static_cast<double>(nranks));
}

double algbw_gbps(double bytes, double time_us) {
  return time_us > 0 ? bytes / (time_us * 1e-6) / 1e9 : 0.0;
}

double busbw_gbps(Collective c, int nranks, double bytes, double time_us) {
  return algbw_gbps(bytes, time_us) * busbw_factor(c, nranks);
}

}  // namespace dtune::comm
