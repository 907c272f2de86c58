// The host's timeline (steady clock), and the choice between it and a GPU's.
#include "train/device_timeline.h"

#include <chrono>

namespace dtune::train {
namespace {

class HostTimeline final : public DeviceTimeline {
 public:
  void begin(Clock::time_point origin) override {
    origin_ = origin;
    ms_.clear();
  }
  size_t mark() override {
    ms_.push_back(std::chrono::duration<double, std::milli>(Clock::now() - origin_).count());
    return ms_.size() - 1;
  }
  std::vector<double> read_ms() override { return ms_; }
  std::string source() const override { return "steady clock"; }

 private:
  Clock::time_point origin_ = Clock::now();
  std::vector<double> ms_;
};

}  // namespace

std::unique_ptr<DeviceTimeline> make_host_timeline() { return std::make_unique<HostTimeline>(); }

std::unique_ptr<DeviceTimeline> make_timeline(int device) {
  return device < 0 ? make_host_timeline() : make_cuda_timeline(device);
}

}  // namespace dtune::train
