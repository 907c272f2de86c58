// Counting wrapper around the CPU allocator. Some kernels (oneDNN scratch space) use the raw
// allocation interface, which needs the DataPtr's context to be the data pointer itself, so sizes
// are kept in a map keyed by pointer rather than in a context object.
#include "train/memory_meter.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "train/cuda_memory.h"

namespace dtune::train {
namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::atomic<bool> g_installed{false};
c10::DeleterFnPtr g_inner_free = nullptr;
std::mutex g_mutex;
std::unordered_map<void*, int64_t>& sizes() {
  static std::unordered_map<void*, int64_t> m;
  return m;
}

void release(void* p) {
  if (p != nullptr) {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = sizes().find(p);
    if (it != sizes().end()) {
      g_current.fetch_sub(it->second);
      sizes().erase(it);
    }
  }
  g_inner_free(p);
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}
  c10::DataPtr allocate(size_t n) override {
    void* p = inner_->raw_allocate(n);
    if (p != nullptr) {
      const int64_t bytes = static_cast<int64_t>(n);
      {
        std::lock_guard<std::mutex> lock(g_mutex);
        sizes()[p] = bytes;
      }
      const int64_t now = g_current.fetch_add(bytes) + bytes;
      int64_t peak = g_peak.load();
      while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
      }
    }
    return c10::DataPtr(p, p, &release, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* inner_;
};

}  // namespace

void CpuMemoryMeter::install() {
  if (g_installed.exchange(true)) return;
  c10::Allocator* inner = c10::GetCPUAllocator();
  g_inner_free = inner->raw_deleter();
  if (g_inner_free == nullptr)
    return;  // an allocator without raw frees: leave it alone, count nothing
  static CountingAllocator counting(inner);
  c10::SetCPUAllocator(&counting, /*priority=*/100);
}
bool CpuMemoryMeter::installed() { return g_installed.load() && g_inner_free != nullptr; }
int64_t CpuMemoryMeter::current_bytes() { return g_current.load(); }
int64_t CpuMemoryMeter::peak_bytes() { return g_peak.load(); }
void CpuMemoryMeter::reset_peak() { g_peak.store(g_current.load()); }

int64_t TensorMemory::current_bytes(int ordinal) {
  return ordinal < 0 ? CpuMemoryMeter::current_bytes() : cuda_allocated_bytes(ordinal);
}

int64_t TensorMemory::peak_bytes(int ordinal) {
  return ordinal < 0 ? CpuMemoryMeter::peak_bytes() : cuda_peak_allocated_bytes(ordinal);
}

int64_t TensorMemory::peak_reserved_bytes(int ordinal) {
  return ordinal < 0 ? CpuMemoryMeter::peak_bytes() : cuda_peak_reserved_bytes(ordinal);
}

void TensorMemory::reset_peak(int ordinal) {
  if (ordinal < 0)
    CpuMemoryMeter::reset_peak();
  else
    cuda_reset_peak(ordinal);
}

std::string TensorMemory::source(int ordinal) {
  return ordinal < 0 ? "peak bytes of CPU tensors (dtune's counting allocator)"
                     : "CUDA caching allocator peak allocated bytes";
}

}  // namespace dtune::train
