// dtune-train's options. Every option can also be set from DTUNE_TRAIN_<NAME> (for sweeps); the
// flag wins. Cross-option checks name both flags; a bad value exits 2 with one line.
#pragma once

#include "train/config.h"

namespace dtune::train {

// Returns an exit code (0 after --help, 2 on bad input) or -1 to go on.
int parse_options(int argc, char** argv, bool print, int world_size, int local_size, Options& o);

}  // namespace dtune::train
