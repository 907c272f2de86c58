// STREAM (McCalpin) on the host: copy c = a, scale b = s·c, add c = a + b, triad a = b + s·c over
// three arrays of doubles, run by OpenMP threads with a static schedule. The arrays are first
// touched (initialised) by the same threads and schedule that later run the kernels, so on a NUMA
// machine each thread's pages sit on its own node. Bandwidth counts the bytes STREAM counts:
// copy and scale 2 × 8 × n, add and triad 3 × 8 × n (write-allocate traffic not counted).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dtune::kernels {

enum class StreamKernel { kCopy, kScale, kAdd, kTriad };
inline constexpr std::array<StreamKernel, 4> kStreamKernels = {
    StreamKernel::kCopy, StreamKernel::kScale, StreamKernel::kAdd, StreamKernel::kTriad};
const char* to_string(StreamKernel k);
// Arrays each kernel reads plus writes (2 for copy and scale, 3 for add and triad).
int stream_arrays_touched(StreamKernel k);

// STREAM's initial values: a = 1, b = 2, c = 0, and its scalar s = 3.
inline constexpr double kStreamScalar = 3.0;

// Three arrays of n doubles, 64-byte aligned, first touched in parallel by `threads` OpenMP
// threads (0: OpenMP's default). Copy deleted, move noexcept.
class HostStream {
 public:
  HostStream(size_t n, int threads);
  size_t size() const { return n_; }
  int threads() const { return threads_; }
  double* a() { return a_.get(); }
  double* b() { return b_.get(); }
  double* c() { return c_.get(); }
  // One run of kernel k over the whole arrays, with the threads and schedule of the first touch.
  void run(StreamKernel k);
  // Restores STREAM's initial values (a = 1, b = 2, c = 0), in parallel.
  void reset();

 private:
  struct FreeDeleter {
    void operator()(double* p) const noexcept;
  };
  size_t n_ = 0;
  int threads_ = 1;
  std::unique_ptr<double[], FreeDeleter> a_, b_, c_;
};

// The reference: one kernel on one thread, plain loops (the tests compare with it exactly).
void stream_reference(StreamKernel k, double* a, double* b, double* c, size_t n);

// GB/s (1e9 B/s) of one run of kernel k over n doubles that took `seconds`.
double stream_gbps(StreamKernel k, size_t n, double seconds);

}  // namespace dtune::kernels
