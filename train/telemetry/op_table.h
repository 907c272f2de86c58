// The operator table of a profile window, as PyTorch's profiler prints it
// (prof.key_averages().table(sort_by="self_cuda_time_total")): per operator name, calls, self and
// total CPU time, self and total device time. Self CPU time = the op's duration minus its direct
// children's on the same thread (nesting by start/end, as torch.autograd.profiler's EventList
// does); a device kernel counts toward the op that launched it (its linked correlation id), and an
// op's device total adds its children's. Torch-free: profiler.cc turns Kineto events into
// ProfiledEvent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtune::train {

struct ProfiledEvent {
  std::string name;
  uint64_t thread = 0;
  int64_t start_ns = 0, end_ns = 0;
  bool on_device = false;           // a kernel, memcpy or memset on the accelerator
  uint64_t correlation = 0;         // CPU op: its id
  uint64_t linked_correlation = 0;  // device event: the id of the CPU op that launched it
};

struct OpRow {
  std::string name;
  int64_t calls = 0;
  double self_cpu_us = 0, cpu_total_us = 0;
  double self_device_us = 0, device_total_us = 0;
};

enum class OpSort { kSelfDevice, kSelfCpu };

// Rows sorted by the given self time (then name); kSelfDevice falls back to CPU order for ties.
std::vector<OpRow> build_op_table(const std::vector<ProfiledEvent>& events, OpSort sort);

// Serialisation for gathering tables to rank 0 (JSON array of rows).
std::string op_table_to_json(const std::vector<OpRow>& rows);
std::vector<OpRow> op_table_from_json(const std::string& text);

// The PyTorch-profiler-style text table of the first `top` rows, with self-time percentages of
// `window_us`.
std::string format_op_table(const std::vector<OpRow>& rows, size_t top, double window_us,
                            bool device);

}  // namespace dtune::train
