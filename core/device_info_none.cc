// Device information for builds without CUDA: no devices, no versions.
#include "core/device_info.h"

namespace dtune {

DeviceSummary query_device_summary() { return {}; }
std::string describe_device(int /*ordinal*/) { return "cpu"; }
DeviceProperties device_properties(int /*ordinal*/) { return {}; }

}  // namespace dtune
