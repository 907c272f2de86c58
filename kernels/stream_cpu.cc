// STREAM on the host with OpenMP (see stream.h).
#include <omp.h>

#include <cstdlib>
#include <new>

#include "kernels/stream.h"

namespace dtune::kernels {

const char* to_string(StreamKernel k) {
  switch (k) {
    case StreamKernel::kCopy:
      return "copy";
    case StreamKernel::kScale:
      return "scale";
    case StreamKernel::kAdd:
      return "add";
    case StreamKernel::kTriad:
      return "triad";
  }
  return "?";
}

int stream_arrays_touched(StreamKernel k) {
  return k == StreamKernel::kCopy || k == StreamKernel::kScale ? 2 : 3;
}

double stream_gbps(StreamKernel k, size_t n, double seconds) {
  return static_cast<double>(stream_arrays_touched(k)) * sizeof(double) * static_cast<double>(n) /
         seconds / 1e9;
}

void HostStream::FreeDeleter::operator()(double* p) const noexcept { std::free(p); }

namespace {
double* allocate(size_t n) {
  // Untouched pages: the first write decides their NUMA node.
  void* p = std::aligned_alloc(64, ((n * sizeof(double) + 63) / 64) * 64);
  if (!p) throw std::bad_alloc();
  return static_cast<double*>(p);
}
}  // namespace

HostStream::HostStream(size_t n, int threads)
    : n_(n),
      threads_(threads > 0 ? threads : omp_get_max_threads()),
      a_(allocate(n)),
      b_(allocate(n)),
      c_(allocate(n)) {
  reset();
}

void HostStream::reset() {
  double* __restrict a = a_.get();
  double* __restrict b = b_.get();
  double* __restrict c = c_.get();
  const long n = static_cast<long>(n_);
#pragma omp parallel for schedule(static) num_threads(threads_)
  for (long j = 0; j < n; ++j) {
    a[j] = 1.0;
    b[j] = 2.0;
    c[j] = 0.0;
  }
}

void HostStream::run(StreamKernel k) {
  double* __restrict a = a_.get();
  double* __restrict b = b_.get();
  double* __restrict c = c_.get();
  const long n = static_cast<long>(n_);
  const double s = kStreamScalar;
  switch (k) {
    case StreamKernel::kCopy:
#pragma omp parallel for schedule(static) num_threads(threads_)
      for (long j = 0; j < n; ++j) c[j] = a[j];
      break;
    case StreamKernel::kScale:
#pragma omp parallel for schedule(static) num_threads(threads_)
      for (long j = 0; j < n; ++j) b[j] = s * c[j];
      break;
    case StreamKernel::kAdd:
#pragma omp parallel for schedule(static) num_threads(threads_)
      for (long j = 0; j < n; ++j) c[j] = a[j] + b[j];
      break;
    case StreamKernel::kTriad:
#pragma omp parallel for schedule(static) num_threads(threads_)
      for (long j = 0; j < n; ++j) a[j] = b[j] + s * c[j];
      break;
  }
}

void stream_reference(StreamKernel k, double* a, double* b, double* c, size_t n) {
  const double s = kStreamScalar;
  for (size_t j = 0; j < n; ++j) {
    switch (k) {
      case StreamKernel::kCopy:
        c[j] = a[j];
        break;
      case StreamKernel::kScale:
        b[j] = s * c[j];
        break;
      case StreamKernel::kAdd:
        c[j] = a[j] + b[j];
        break;
      case StreamKernel::kTriad:
        a[j] = b[j] + s * c[j];
        break;
    }
  }
}

}  // namespace dtune::kernels
