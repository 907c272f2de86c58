// STREAM on a CUDA device: the same four kernels and byte counts as the host version
// (kernels/stream.h), over three device arrays of doubles, timed with CUDA events. Only built
// with CUDA (kernels/stream_cuda.cu); callers check has_cuda_device() first.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/stream.h"

namespace dtune::kernels {

// Three device arrays of n doubles on the current device, set to STREAM's initial values.
class DeviceStream {
 public:
  explicit DeviceStream(size_t n);
  ~DeviceStream();
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  size_t size() const { return n_; }
  // One run of kernel k on the default stream; returns its time in ms (CUDA events).
  float run_ms(StreamKernel k);
  void reset();
  // Copies the arrays back: {a, b, c}, each n doubles.
  std::vector<std::vector<double>> download() const;
  void upload(const std::vector<double>& a, const std::vector<double>& b,
              const std::vector<double>& c);

 private:
  size_t n_ = 0;
  double *a_ = nullptr, *b_ = nullptr, *c_ = nullptr;
};

}  // namespace dtune::kernels
