// dtune-comm: collective communication benchmark with nccl-tests' flags and table, every
// iteration of every rank kept in HDF5. Launch: mpirun -np N dtune-comm -b 8 -e 64M -f 2.
#include "benchmarks/comm/driver.h"
#include "benchmarks/comm/options.h"
#include "core/main_guard.h"
#include "core/signals.h"

int main(int argc, char** argv) {
  dtune::end_process(dtune::run_main(argc, argv, "dtune-comm", [](const dtune::MainArgs& a) {
    dtune::comm::Options o;
    const int rc =
        dtune::comm::parse_options(a.argc, a.argv, a.ctx.is_root(), a.ctx.world_size(), o);
    if (rc >= 0) return rc;
    dtune::install_stop_handlers();
    return dtune::comm::run_driver(o, a);
  }));
}
