// Topology discovery with hwloc and NVML, and its HDF5 and matrix forms (see topology.h).
#include "core/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "core/cli.h"
#include "core/h5.h"
#include "core/nvml_loader.h"

namespace dtune {
namespace {

std::string bus_id_of(hwloc_obj_t o) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%01x",
                static_cast<unsigned>(o->attr->pcidev.domain), o->attr->pcidev.bus,
                o->attr->pcidev.dev, o->attr->pcidev.func);
  return buf;
}

// From the PCI class (0x03: display, 0x02: network, 0x0108: NVMe) and the OS devices below it.
std::string kind_of(hwloc_obj_t o, bool* os_network) {
  const unsigned cls = o->attr->pcidev.class_id;
  *os_network = false;
  for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
    if (c->type == HWLOC_OBJ_OS_DEVICE && (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
                                           c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS))
      *os_network = true;
  if ((cls >> 8) == 0x03 && o->attr->pcidev.vendor_id == 0x10de) return "gpu";
  if ((cls >> 8) == 0x02 || *os_network) return "nic";
  if (cls == 0x0108) return "nvme";
  return "other";
}

std::string os_names(hwloc_obj_t o) {
  std::string names;
  for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
    if (c->type == HWLOC_OBJ_OS_DEVICE && c->name)
      names += (names.empty() ? "" : ",") + std::string(c->name);
  return names;
}

int numa_of(hwloc_topology_t topo, hwloc_obj_t o) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, o);
  if (!anc || !anc->cpuset) return -1;
  int found = -1, hits = 0;
  for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n));) {
    if (n->cpuset && hwloc_bitmap_isincluded(anc->cpuset, n->cpuset)) {
      found = static_cast<int>(n->logical_index);
      ++hits;
    }
  }
  return hits == 1 ? found : -1;
}

bool is_bridge(hwloc_obj_t o) { return o->type == HWLOC_OBJ_BRIDGE; }

// nvidia-smi's PCIe names for the path between two PCI devices (NVLink is decided elsewhere).
std::string pcie_link(hwloc_obj_t a, hwloc_obj_t b, int numa_a, int numa_b) {
  if (a == b) return "X";
  std::vector<hwloc_obj_t> up;
  for (hwloc_obj_t o = a->parent; o; o = o->parent) up.push_back(o);
  hwloc_obj_t common = nullptr;
  int bridges_b = 0;
  for (hwloc_obj_t o = b->parent; o && !common; o = o->parent) {
    if (std::find(up.begin(), up.end(), o) != up.end())
      common = o;
    else if (is_bridge(o))
      ++bridges_b;
  }
  int bridges_a = 0;
  for (hwloc_obj_t o : up) {
    if (o == common) break;
    if (is_bridge(o)) ++bridges_a;
  }
  if (common && is_bridge(common)) {
    if (common->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) return "PHB";
    return bridges_a <= 1 && bridges_b <= 1 ? "PIX" : "PXB";
  }
  return numa_a >= 0 && numa_a == numa_b ? "NODE" : "SYS";
}

std::string plural(int n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

bool Topology::has_nvlink() const {
  for (const auto& row : links)
    for (const auto& c : row)
      if (c.rfind("NV", 0) == 0 && c != "NODE") return true;
  return false;
}

std::string Topology::summary() const {
  if (!error.empty()) return "topology unknown: " + error;
  std::string s = plural(packages, "package", "packages") + ", " +
                  plural(numa_nodes, "NUMA node", "NUMA nodes") + ", " +
                  plural(cores, "core", "cores") + ", " + plural(pus, "thread", "threads");
  std::string c;
  for (const auto& l : caches)
    c += (c.empty() ? "" : ", ") + l.name + " " + format_size(static_cast<uint64_t>(l.size_bytes)) +
         " x" + std::to_string(l.count);
  if (!c.empty()) s += "; " + c;
  int gpus = 0;
  std::string nics;
  for (const auto& d : pci) {
    gpus += d.kind == "gpu";
    if (d.kind == "nic") nics += (nics.empty() ? "" : " ") + (d.name.empty() ? d.bus_id : d.name);
  }
  s += "; " + plural(gpus, "GPU", "GPUs");
  if (!gpu_names.empty()) s += " (" + gpu_names.front() + ")";
  if (has_nvlink()) s += ", NVLink";
  s += "; NICs: " + (nics.empty() ? std::string("none") : nics);
  return s;
}

Topology detect_topology() {
  Topology t;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) {
    t.error = "hwloc_topology_init failed";
    return t;
  }
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    t.error = "hwloc_topology_load failed";
    hwloc_topology_destroy(topo);
    return t;
  }
  t.packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  t.numa_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  t.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  t.pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  const std::pair<hwloc_obj_type_t, const char*> levels[] = {
      {HWLOC_OBJ_L1CACHE, "L1d"}, {HWLOC_OBJ_L2CACHE, "L2"}, {HWLOC_OBJ_L3CACHE, "L3"}};
  for (const auto& [type, name] : levels) {
    const int n = hwloc_get_nbobjs_by_type(topo, type);
    if (n <= 0) continue;
    hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, 0);
    t.caches.push_back({name, static_cast<int64_t>(o->attr->cache.size), n});
  }
  NvmlReport nvml = query_nvml();
  t.nvml_status = nvml.status;
  for (const auto& g : nvml.gpus) t.gpu_names.push_back(g.name);
  // PCI devices: GPUs and NICs (the matrix's rows) first.
  std::vector<std::pair<PciDevice, hwloc_obj_t>> found;
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_pcidev(topo, o));) {
    bool os_network = false;
    PciDevice d;
    d.bus_id = bus_id_of(o);
    d.kind = kind_of(o, &os_network);
    d.name = os_names(o);
    d.vendor_id = o->attr->pcidev.vendor_id;
    d.device_id = o->attr->pcidev.device_id;
    d.numa_node = numa_of(topo, o);
    found.emplace_back(d, o);
  }
  auto rank = [](const std::string& k) { return k == "gpu" ? 0 : k == "nic" ? 1 : 2; };
  std::stable_sort(found.begin(), found.end(), [&](const auto& x, const auto& y) {
    return rank(x.first.kind) < rank(y.first.kind);
  });
  std::vector<hwloc_obj_t> rows;
  int gpu_i = 0, nic_i = 0;
  for (const auto& [d, o] : found) {
    t.pci.push_back(d);
    if (d.kind == "gpu" || d.kind == "nic") {
      t.labels.push_back(d.kind == "gpu" ? "GPU" + std::to_string(gpu_i++)
                                         : "NIC" + std::to_string(nic_i++));
      t.label_bus_ids.push_back(d.bus_id);
      rows.push_back(o);
    }
  }
  // NVLink link counts between GPUs: direct links, or through NVSwitches (a link to a PCI id
  // that is no GPU): then every two GPUs with switch links share min(their switch links).
  std::map<std::string, std::map<std::string, int>> direct;
  std::map<std::string, int> via_switch;
  std::set<std::string> gpu_ids;
  for (const auto& g : nvml.gpus) gpu_ids.insert(g.bus_id);
  for (const auto& g : nvml.gpus)
    for (const auto& peer : g.nvlink_peers)
      (gpu_ids.count(peer) ? direct[g.bus_id][peer] : via_switch[g.bus_id]) += 1;
  const size_t n = rows.size();
  t.links.assign(n, std::vector<std::string>(n));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const std::string &a = t.label_bus_ids[i], &b = t.label_bus_ids[j];
      int nv = 0;
      if (i != j && direct.count(a) && direct[a].count(b)) nv = direct[a][b];
      if (i != j && !nv && via_switch.count(a) && via_switch.count(b))
        nv = std::min(via_switch[a], via_switch[b]);
      t.links[i][j] =
          nv > 0 ? "NV" + std::to_string(nv)
                 : pcie_link(rows[i], rows[j], numa_of(topo, rows[i]), numa_of(topo, rows[j]));
    }
  }
  hwloc_topology_destroy(topo);
  return t;
}

std::string format_link_matrix(const Topology& t) {
  if (t.labels.empty()) return "# no GPUs or NICs on the PCI bus (" + t.nvml_status + ")\n";
  std::string out = "#       ";
  char cell[64];
  for (const auto& l : t.labels) {
    std::snprintf(cell, sizeof cell, "%-7s", l.c_str());
    out += cell;
  }
  out += "NUMA  bus id        name\n";
  for (size_t i = 0; i < t.labels.size(); ++i) {
    std::snprintf(cell, sizeof cell, "  %-6s", t.labels[i].c_str());
    out += cell;
    for (const auto& c : t.links[i]) {
      std::snprintf(cell, sizeof cell, "%-7s", c.c_str());
      out += cell;
    }
    const PciDevice* d = nullptr;
    for (const auto& p : t.pci)
      if (p.bus_id == t.label_bus_ids[i]) d = &p;
    std::snprintf(cell, sizeof cell, "%-5d %-13s ", d ? d->numa_node : -1,
                  t.label_bus_ids[i].c_str());
    out += cell + (d ? d->name : std::string()) + "\n";
  }
  out +=
      "# X = itself, NV# = # NVLink links, PIX = at most one PCIe bridge, PXB = several bridges\n"
      "# (no host bridge), PHB = a PCIe host bridge, NODE = host bridges within a NUMA node,\n"
      "# SYS = across NUMA nodes. " +
      t.nvml_status + "\n";
  return out;
}

void write_topology(hid_t parent, const std::string& name, const Topology& t) {
  h5::Handle g = h5::create_group(parent, name);
  const hid_t id = g.get();
  h5::write_attr(id, "summary", t.summary());
  h5::write_attr(id, "packages", t.packages);
  h5::write_attr(id, "numa_nodes", t.numa_nodes);
  h5::write_attr(id, "cores", t.cores);
  h5::write_attr(id, "threads", t.pus);
  h5::write_attr(id, "nvml_status", t.nvml_status);
  h5::write_attr(id, "error", t.error);
  std::vector<std::string> cache_names;
  std::vector<int64_t> cache_bytes, cache_count;
  for (const auto& c : t.caches) {
    cache_names.push_back(c.name);
    cache_bytes.push_back(c.size_bytes);
    cache_count.push_back(c.count);
  }
  h5::write_strings(id, "cache_level", cache_names);
  h5::write_dataset(id, "cache_size_bytes", {cache_bytes.size()}, cache_bytes.data());
  h5::write_dataset(id, "cache_count", {cache_count.size()}, cache_count.data());
  std::vector<std::string> bus, kind, names;
  std::vector<int64_t> vendor, device, numa;
  for (const auto& d : t.pci) {
    bus.push_back(d.bus_id);
    kind.push_back(d.kind);
    names.push_back(d.name);
    vendor.push_back(d.vendor_id);
    device.push_back(d.device_id);
    numa.push_back(d.numa_node);
  }
  h5::write_strings(id, "pci_bus_id", bus);
  h5::write_strings(id, "pci_kind", kind);
  h5::write_strings(id, "pci_name", names);
  h5::write_dataset(id, "pci_vendor_id", {vendor.size()}, vendor.data());
  h5::write_dataset(id, "pci_device_id", {device.size()}, device.data());
  h5::write_dataset(id, "pci_numa_node", {numa.size()}, numa.data());
  h5::write_strings(id, "gpu_name", t.gpu_names);
  h5::write_strings(id, "link_label", t.labels);
  h5::write_strings(id, "link_bus_id", t.label_bus_ids);
  std::vector<std::string> flat;
  for (const auto& row : t.links) flat.insert(flat.end(), row.begin(), row.end());
  h5::write_strings(id, "link", flat);  // [L*L], row-major (h5::write_strings is 1-D)
}

}  // namespace dtune
