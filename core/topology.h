// The machine's topology, from hwloc (packages, NUMA nodes, cores, hardware threads, caches and the
// PCI devices that matter: GPUs, NICs, NVMe) and NVML (GPU names and NVLink links, loaded at run
// time). From both, the link between every two GPUs and NICs as `nvidia-smi topo -m` names it:
// X (itself), NV# (# NVLink links), PIX (one PCIe bridge), PXB (several bridges, no host bridge),
// PHB (through a PCIe host bridge), NODE (host bridges within one NUMA node), SYS (across NUMA
// nodes). Every results file records the summary in its provenance; dtune-probe topology prints
// the matrix.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dtune {

struct CacheLevel {
  std::string name;        // "L1d", "L2", "L3"
  int64_t size_bytes = 0;  // of one cache
  int count = 0;           // caches of this level in the machine
};

struct PciDevice {
  std::string bus_id;  // "0000:1b:00.0"
  std::string kind;    // "gpu", "nic", "nvme", "other"
  std::string name;    // the OS device names ("eth0", "mlx5_0", "nvme0n1") or the PCI class
  int vendor_id = 0, device_id = 0;
  int numa_node = -1;  // hwloc logical index of its NUMA node; -1: unknown
};

struct Topology {
  int packages = 0, numa_nodes = 0, cores = 0, pus = 0;
  std::vector<CacheLevel> caches;
  std::vector<PciDevice> pci;          // GPUs and NICs first, then the rest hwloc keeps
  std::vector<std::string> gpu_names;  // NVML's, in NVML order (empty without the driver)
  std::string nvml_status;
  // The matrix over GPUs then NICs (labels GPU0.., NIC0..), cells as nvidia-smi names them.
  std::vector<std::string> labels;
  std::vector<std::string> label_bus_ids;
  std::vector<std::vector<std::string>> links;
  std::string error;  // non-empty when hwloc failed (the counts are then zero)

  // "1 package, 1 NUMA node, 2 cores, 2 threads; L1d 48K x2, L2 2M x2, L3 32M x1; 0 GPUs; NICs:
  // eth0"
  std::string summary() const;
  bool has_nvlink() const;
};

// Never throws: a failure of hwloc is recorded in `error`.
Topology detect_topology();
// The matrix as `nvidia-smi topo -m` prints it, with a legend; one line saying there are no GPUs
// or NICs when the matrix is empty.
std::string format_link_matrix(const Topology& t);
// A group NAME under `parent`: the counts and summary as attributes, caches, PCI devices and the
// matrix as datasets (results/SCHEMA.md).
void write_topology(hid_t parent, const std::string& name, const Topology& t);

}  // namespace dtune
