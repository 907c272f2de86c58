// RAII for CUDA runtime handles: a non-blocking stream, a timing event, device memory and pinned
// host memory. Each is created on the current device by a factory, owns its handle, has copy
// deleted and noexcept moves, is empty after being moved from (or default-constructed), and
// releases with a warning, never an exception, on destruction.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace dtune {

// A stream created with cudaStreamNonBlocking: it does not synchronise with the legacy default
// stream, so work that other code puts on stream 0 cannot stall or reorder our timed operations.
class CudaStream {
 public:
  CudaStream() = default;
  static CudaStream create();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  ~CudaStream();

  // nullptr when empty (which CUDA would read as the legacy default stream: check first).
  cudaStream_t get() const { return stream_; }
  explicit operator bool() const { return stream_ != nullptr; }
  // Blocks without a deadline: for work that cannot hang (copies); NCCL work waits on NcclComm.
  void synchronize() const;

 private:
  explicit CudaStream(cudaStream_t stream) : stream_(stream) {}
  void reset() noexcept;
  cudaStream_t stream_ = nullptr;
};

enum class EventTiming { kEnabled, kDisabled };

class CudaEvent {
 public:
  CudaEvent() = default;
  static CudaEvent create(EventTiming timing = EventTiming::kEnabled);
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  ~CudaEvent();

  cudaEvent_t get() const { return event_; }
  explicit operator bool() const { return event_ != nullptr; }
  void record(cudaStream_t stream);
  // Whether the work captured by the last record() has finished (cudaEventQuery).
  bool done() const;
  // Milliseconds of device time from `start` to `end` (cudaEventElapsedTime, about 0.5 us
  // resolution). Both must have been recorded with timing enabled and have completed.
  static double elapsed_ms(const CudaEvent& start, const CudaEvent& end);

 private:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  void reset() noexcept;
  cudaEvent_t event_ = nullptr;
};

// cudaMalloc'd bytes on the current device. Zero bytes allocates nothing (data() is nullptr).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static DeviceBuffer allocate(size_t size_bytes);
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }  // bytes
  bool empty() const { return data_ == nullptr; }

 private:
  DeviceBuffer(void* data, size_t size) : data_(data), size_(size) {}
  void reset() noexcept;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Page-locked host memory (cudaMallocHost): the fast and truly asynchronous side of host<->device
// copies. Zero bytes allocates nothing.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static PinnedBuffer allocate(size_t size_bytes);
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  ~PinnedBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }  // bytes
  bool empty() const { return data_ == nullptr; }

 private:
  PinnedBuffer(void* data, size_t size) : data_(data), size_(size) {}
  void reset() noexcept;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace dtune
