// Reading a dtune-probe gemm peak (see measured_peak.h) with the HDF5 C API.
#include "train/measured_peak.h"

#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/h5.h"

namespace dtune::train {
namespace {

std::optional<std::string> string_attr(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  h5::Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return std::nullopt;
  h5::Handle type(H5Aget_type(a.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING) return std::nullopt;
  if (H5Tis_variable_str(type.get()) > 0) {
    char* s = nullptr;
    h5::Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    if (H5Aread(a.get(), mem.get(), &s) < 0 || !s) return std::nullopt;
    std::string out = s;
    H5free_memory(s);
    return out;
  }
  const size_t n = H5Tget_size(type.get());
  std::string out(n, '\0');
  if (H5Aread(a.get(), type.get(), out.data()) < 0) return std::nullopt;
  out.resize(out.find('\0') == std::string::npos ? n : out.find('\0'));
  return out;
}

std::optional<double> double_attr(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  h5::Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  double v = 0;
  if (!a.valid() || H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) return std::nullopt;
  return v;
}

struct Found {
  double tflops = 0;
  int threads = 0;
};

std::optional<Found> find_gemm(hid_t file, const std::string& device, const std::string& dtype) {
  if (H5Lexists(file, "runs", H5P_DEFAULT) <= 0) return std::nullopt;
  h5::Handle runs(H5Gopen2(file, "runs", H5P_DEFAULT), H5Gclose);
  H5G_info_t info{};
  if (!runs.valid() || H5Gget_info(runs.get(), &info) < 0) return std::nullopt;
  std::optional<Found> best;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[256];
    if (H5Lget_name_by_idx(runs.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name,
                           H5P_DEFAULT) < 0)
      continue;
    h5::Handle g(H5Gopen2(runs.get(), name, H5P_DEFAULT), H5Gclose);
    if (!g.valid()) continue;
    if (string_attr(g.get(), "probe") != "gemm" || string_attr(g.get(), "device") != device ||
        string_attr(g.get(), "dtype") != dtype || string_attr(g.get(), "status") != "ok")
      continue;
    const auto peak = double_attr(g.get(), "peak_tflops");
    if (!peak || !(*peak > 0)) continue;
    if (!best || *peak > best->tflops)
      best = Found{*peak, static_cast<int>(double_attr(g.get(), "threads").value_or(0))};
  }
  return best;
}

}  // namespace

std::string gemm_dtype_for(const std::string& precision, bool cuda) {
  if (precision == "tf32") return cuda ? "tf32" : "float32";
  if (precision == "fp16") return "float16";
  if (precision == "bf16") return "bfloat16";
  return "float32";
}

std::optional<MeasuredPeak> read_measured_peak(const std::string& file, const std::string& device,
                                               const std::string& dtype, int rank_threads) {
  h5::quiet_errors();
  h5::Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.valid())
    throw UsageError("--peak-from " + file +
                     ": not a readable HDF5 file (a dtune-probe gemm file)");
  const auto found = find_gemm(f.get(), device, dtype);
  if (!found) return std::nullopt;
  MeasuredPeak p;
  p.tflops = found->tflops;
  char what[512];
  if (device == "cpu" && found->threads > 0 && rank_threads > 0 && rank_threads < found->threads) {
    p.tflops = found->tflops * rank_threads / found->threads;
    std::snprintf(what, sizeof what,
                  "measured (dtune-probe gemm): %s on cpu, %.4g TFLOP/s on %d threads, x %d/%d for "
                  "the rank's threads (linear share), in %s",
                  dtype.c_str(), found->tflops, found->threads, rank_threads, found->threads,
                  file.c_str());
  } else {
    std::snprintf(
        what, sizeof what, "measured (dtune-probe gemm): %s on %s%s, in %s", dtype.c_str(),
        device.c_str(),
        found->threads > 0 ? (", " + std::to_string(found->threads) + " threads").c_str() : "",
        file.c_str());
  }
  p.source = what;
  return p;
}

std::optional<MeasuredPeak> newest_measured_peak(const std::string& dir, const std::string& device,
                                                 const std::string& dtype, int rank_threads) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, std::string>> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("dtune-probe", 0) == 0 && e.path().extension() == ".h5")
      files.emplace_back(e.last_write_time(ec), e.path().string());
  }
  std::sort(files.rbegin(), files.rend());
  for (const auto& [when, path] : files) {
    try {
      if (auto p = read_measured_peak(path, device, dtype, rank_threads)) return p;
    } catch (const UsageError&) {
      // An unreadable file among them (a run still writing): the next newest.
    }
  }
  return std::nullopt;
}

}  // namespace dtune::train
