// CUDA handle ownership: creation checks and throws, release only warns (destructors and move
// assignment must not throw). Moves hand the raw handle over with std::exchange, leaving the
// source empty.
#include "core/cuda/cuda_handles.h"

#include <utility>

#include "core/cuda/cuda_error.h"

namespace dtune {

// ---- CudaStream ----

CudaStream CudaStream::create() {
  cudaStream_t s = nullptr;
  DTUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return CudaStream(s);
}

CudaStream::CudaStream(CudaStream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    reset();
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

CudaStream::~CudaStream() { reset(); }

void CudaStream::reset() noexcept {
  if (stream_ != nullptr) DTUNE_CUDA_WARN(cudaStreamDestroy(stream_));
  stream_ = nullptr;
}

void CudaStream::synchronize() const {
  DTUNE_CHECK(stream_ != nullptr, "synchronize() on an empty CudaStream");
  DTUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---- CudaEvent ----

CudaEvent CudaEvent::create(EventTiming timing) {
  cudaEvent_t e = nullptr;
  const unsigned flags =
      timing == EventTiming::kEnabled ? cudaEventDefault : cudaEventDisableTiming;
  DTUNE_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
  return CudaEvent(e);
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    reset();
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

CudaEvent::~CudaEvent() { reset(); }

void CudaEvent::reset() noexcept {
  if (event_ != nullptr) DTUNE_CUDA_WARN(cudaEventDestroy(event_));
  event_ = nullptr;
}

void CudaEvent::record(cudaStream_t stream) {
  DTUNE_CHECK(event_ != nullptr, "record() on an empty CudaEvent");
  DTUNE_CUDA_CHECK(cudaEventRecord(event_, stream));
}

bool CudaEvent::done() const {
  DTUNE_CHECK(event_ != nullptr, "done() on an empty CudaEvent");
  const cudaError_t rc = cudaEventQuery(event_);
  if (rc == cudaErrorNotReady) return false;
  DTUNE_CUDA_CHECK(rc);
  return true;
}

double CudaEvent::elapsed_ms(const CudaEvent& start, const CudaEvent& end) {
  DTUNE_CHECK(start.event_ != nullptr && end.event_ != nullptr,
              "elapsed_ms() between empty CudaEvents");
  float ms = 0.0f;
  DTUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return static_cast<double>(ms);
}

// ---- DeviceBuffer ----

DeviceBuffer DeviceBuffer::allocate(size_t size_bytes) {
  if (size_bytes == 0) return DeviceBuffer();
  void* p = nullptr;
  DTUNE_CUDA_CHECK(cudaMalloc(&p, size_bytes));
  return DeviceBuffer(p, size_bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

void DeviceBuffer::reset() noexcept {
  if (data_ != nullptr) DTUNE_CUDA_WARN(cudaFree(data_));
  data_ = nullptr;
  size_ = 0;
}

// ---- PinnedBuffer ----

PinnedBuffer PinnedBuffer::allocate(size_t size_bytes) {
  if (size_bytes == 0) return PinnedBuffer();
  void* p = nullptr;
  DTUNE_CUDA_CHECK(cudaMallocHost(&p, size_bytes));
  return PinnedBuffer(p, size_bytes);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() { reset(); }

void PinnedBuffer::reset() noexcept {
  if (data_ != nullptr) DTUNE_CUDA_WARN(cudaFreeHost(data_));
  data_ = nullptr;
  size_ = 0;
}

}  // namespace dtune
