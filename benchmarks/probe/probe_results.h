// dtune-probe's measurements as plain structs (one per probe), each printed as a `#`-commented
// table and written as a `benchmark = "probe"` run group (results/SCHEMA.md). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/results_file.h"
#include "core/topology.h"

namespace dtune::probe {

// One dtype's GEMM sweep; R = ranks, S = shapes.
struct GemmRecord {
  std::string device;       // "cpu", "cuda"
  std::string device_name;  // rank 0's describe_device()
  std::string dtype;        // "float32", "tf32", "float16", "bfloat16"
  std::string library;      // "torch::mm", "cublaslt"
  int threads = 0;          // intra-op threads (CPU), 0 on GPU
  int64_t min_iters = 0;
  double min_time_s = 0;
  std::vector<int64_t> m, n, k;        // [S]
  std::vector<double> tflops_median;   // [R × S] rank-major
  std::vector<double> tflops_best;     // [R × S]
  std::vector<std::string> algorithm;  // [S] cuBLASLt's heuristic choice (rank 0); empty for torch
  int64_t workspace_bytes = 0;         // cuBLASLt's workspace; 0 for torch::mm
  double max_seconds = 0;              // --max-seconds (0: none)
  std::vector<std::string> not_measured;  // shapes left out by --max-seconds, "MxNxK"
  size_t ranks = 1;
  size_t best_shape() const;  // the shape with rank 0's highest median
  double peak_tflops() const { return m.empty() ? 0 : tflops_median[best_shape()]; }
};

// STREAM on one device kind; K = 4 kernels.
struct MemoryRecord {
  std::string device, device_name;
  int threads = 0;
  int64_t array_bytes = 0;  // one of the three arrays
  int64_t iters = 0;
  std::vector<std::string> kernel;  // [K]
  std::vector<double> gbps_best;    // [R × K]: STREAM's figure (best iteration, first excluded)
  std::vector<double> gbps_median;  // [R × K]
  size_t ranks = 1;
};

// Host <-> device copies over sizes, for one direction and host memory kind.
struct CopyRecord {
  std::string direction;  // "h2d", "d2h"
  std::string memory;     // "pinned", "pageable"
  std::string device_name;
  std::vector<int64_t> size_bytes;  // [S]
  std::vector<double> gbps;         // [R × S] median
  std::vector<double> time_us;      // [R × S] median
  size_t ranks = 1;
};

// Device <-> device copies between every two visible GPUs of rank 0.
struct P2pRecord {
  bool peer_access = false;
  int64_t size_bytes = 0;
  std::vector<std::string> gpus;   // [G]
  std::vector<double> gbps;        // [G × G]; NaN on the diagonal or where access is impossible
  std::vector<double> latency_us;  // [G × G] of a small copy
};

struct LaunchRecord {
  std::string device_name;
  double launch_us = 0;       // enqueue of an empty kernel (CPU side), median
  double launch_sync_us = 0;  // launch + synchronize, median
  double event_us = 0;        // record + query of an event, median
  int64_t iters = 0;
};

void print_gemm(const GemmRecord& r);
void print_memory(const MemoryRecord& r);
void print_copy(const CopyRecord& r);
void print_p2p(const P2pRecord& r);
void print_launch(const LaunchRecord& r);

// Root only: one run group each, status "ok", flushed.
void write_gemm(ResultsFile& f, const GemmRecord& r);
void write_memory(ResultsFile& f, const MemoryRecord& r);
void write_copy(ResultsFile& f, const CopyRecord& r);
void write_p2p(ResultsFile& f, const P2pRecord& r);
void write_launch(ResultsFile& f, const LaunchRecord& r);
void write_topology_run(ResultsFile& f, const Topology& t);

}  // namespace dtune::probe
