// What a training mode adds to a run's results beyond its steps and the outcome every mode shares
// (outcome.h): its own rows, gathered to rank 0, printed and written into the run's group, and, on
// the way out of a failure, what rank 0 can write of its own part alone. Data parallelism adds
// nothing; the pipeline adds its stages' measurements (pipeline/pipeline_results.h). The results
// writers and the run monitor know this interface only, not the modes.
#pragma once

#include <cstdio>
#include <string>

#include "core/context.h"
#include "core/h5.h"

namespace dtune::train {

class ModeResults {
 public:
  virtual ~ModeResults() = default;
  // The group it writes under the run's ("pipeline").
  virtual std::string name() const = 0;
  // Collective over the run's ranks, after the last step: every rank's part to rank 0.
  virtual void gather(const RunContext& ctx) = 0;
  // Rank 0, after gather(): the table on `f`, and the rows into the run's group.
  virtual void print(FILE* f) const = 0;
  virtual void write(hid_t run_group) const = 0;
  // Rank 0 on the way out of a failure (no communication): this rank's part alone, marked as such.
  virtual void write_partial(hid_t run_group) const = 0;
};

}  // namespace dtune::train
