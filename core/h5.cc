// HDF5 handles and writers (C API).
#include "core/h5.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace dtune::h5 {

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    close();
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Handle::close() noexcept {
  if (id_ >= 0 && closer_ != nullptr && closer_(id_) < 0)
    std::fprintf(stderr, "dtune: warning: closing HDF5 object %lld failed (%s)\n",
                 static_cast<long long>(id_), process_identity().c_str());
  id_ = H5I_INVALID_HID;
}

void quiet_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

Handle create_file(const std::string& path) {
  quiet_errors();
  return Handle(DTUNE_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)),
                H5Fclose);
}

Handle open_file_rw(const std::string& path) {
  quiet_errors();
  return Handle(DTUNE_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)), H5Fclose);
}

Handle create_group(hid_t parent, const std::string& name) {
  return Handle(
      DTUNE_H5_CHECK(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
      H5Gclose);
}

Handle open_group(hid_t parent, const std::string& name) {
  return Handle(DTUNE_H5_CHECK(H5Gopen2(parent, name.c_str(), H5P_DEFAULT)), H5Gclose);
}

namespace {

// Variable-length UTF-8 strings: what h5py writes for str and reads back as str.
Handle string_type() {
  Handle t(DTUNE_H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  DTUNE_H5_CHECK(H5Tset_size(t.get(), H5T_VARIABLE));
  DTUNE_H5_CHECK(H5Tset_cset(t.get(), H5T_CSET_UTF8));
  return t;
}

void write_scalar_attr(hid_t obj, const std::string& name, hid_t mem_type, hid_t file_type,
                       const void* value) {
  if (H5Aexists(obj, name.c_str()) > 0) DTUNE_H5_CHECK(H5Adelete(obj, name.c_str()));
  Handle space(DTUNE_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  Handle attr(DTUNE_H5_CHECK(
                  H5Acreate2(obj, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT)),
              H5Aclose);
  DTUNE_H5_CHECK(H5Awrite(attr.get(), mem_type, value));
}

Handle dataset_plist(const std::vector<hsize_t>& dims) {
  Handle plist(DTUNE_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  hsize_t total = 1;
  for (hsize_t d : dims) total *= d;
  if (dims.empty() || total < 64) return plist;  // tiny: contiguous, no filters
  // Chunks of at most 64K elements: drop leading dimensions to 1 until the rest fits, so a chunk
  // holds whole trailing rows (all iterations of one rank, say).
  constexpr hsize_t kMaxChunk = 65536;
  std::vector<hsize_t> chunk(dims);
  hsize_t size = total;
  for (size_t i = 0; i + 1 < chunk.size() && size > kMaxChunk; ++i) {
    size /= chunk[i];
    chunk[i] = 1;
  }
  if (size > kMaxChunk) chunk.back() = kMaxChunk;
  DTUNE_H5_CHECK(H5Pset_chunk(plist.get(), static_cast<int>(chunk.size()), chunk.data()));
  DTUNE_H5_CHECK(H5Pset_shuffle(plist.get()));
  DTUNE_H5_CHECK(H5Pset_deflate(plist.get(), 4));
  return plist;
}

void write_numeric(hid_t parent, const std::string& name, const std::vector<hsize_t>& dims,
                   hid_t type, const void* data) {
  Handle space(
      DTUNE_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)),
      H5Sclose);
  Handle plist = dataset_plist(dims);
  Handle ds(DTUNE_H5_CHECK(H5Dcreate2(parent, name.c_str(), type, space.get(), H5P_DEFAULT,
                                      plist.get(), H5P_DEFAULT)),
            H5Dclose);
  DTUNE_H5_CHECK(H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

}  // namespace

void write_attr(hid_t obj, const std::string& name, const std::string& value) {
  Handle t = string_type();
  const char* p = value.c_str();
  write_scalar_attr(obj, name, t.get(), t.get(), &p);
}
void write_attr(hid_t obj, const std::string& name, const char* value) {
  write_attr(obj, name, std::string(value));
}
void write_attr(hid_t obj, const std::string& name, int64_t value) {
  write_scalar_attr(obj, name, H5T_NATIVE_INT64, H5T_STD_I64LE, &value);
}
void write_attr(hid_t obj, const std::string& name, int value) {
  write_attr(obj, name, static_cast<int64_t>(value));
}
void write_attr(hid_t obj, const std::string& name, double value) {
  write_scalar_attr(obj, name, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, &value);
}

void write_dataset(hid_t parent, const std::string& name, const std::vector<hsize_t>& dims,
                   const double* data) {
  write_numeric(parent, name, dims, H5T_NATIVE_DOUBLE, data);
}
void write_dataset(hid_t parent, const std::string& name, const std::vector<hsize_t>& dims,
                   const int64_t* data) {
  write_numeric(parent, name, dims, H5T_NATIVE_INT64, data);
}

void write_strings(hid_t parent, const std::string& name, const std::vector<std::string>& values) {
  Handle t = string_type();
  const hsize_t n = values.size();
  Handle space(DTUNE_H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  Handle ds(DTUNE_H5_CHECK(H5Dcreate2(parent, name.c_str(), t.get(), space.get(), H5P_DEFAULT,
                                      H5P_DEFAULT, H5P_DEFAULT)),
            H5Dclose);
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  if (n) DTUNE_H5_CHECK(H5Dwrite(ds.get(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()));
}

Handle create_rows(hid_t parent, const std::string& name, const std::vector<hsize_t>& cols,
                   hid_t type) {
  std::vector<hsize_t> dims{0}, max{H5S_UNLIMITED}, chunk{1};
  hsize_t row = 1;
  for (hsize_t c : cols) {
    dims.push_back(c);
    max.push_back(c);
    chunk.push_back(std::max<hsize_t>(c, 1));
    row *= std::max<hsize_t>(c, 1);
  }
  // About 4K elements per chunk: a few hundred steps of a few ranks, compressed together.
  chunk[0] = std::max<hsize_t>(1, 4096 / row);
  Handle space(
      DTUNE_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max.data())),
      H5Sclose);
  Handle plist(DTUNE_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  DTUNE_H5_CHECK(H5Pset_chunk(plist.get(), static_cast<int>(chunk.size()), chunk.data()));
  DTUNE_H5_CHECK(H5Pset_shuffle(plist.get()));
  DTUNE_H5_CHECK(H5Pset_deflate(plist.get(), 4));
  return Handle(DTUNE_H5_CHECK(H5Dcreate2(parent, name.c_str(), type, space.get(), H5P_DEFAULT,
                                          plist.get(), H5P_DEFAULT)),
                H5Dclose);
}

void append_rows(hid_t dataset, hsize_t rows, hid_t mem_type, const void* data) {
  if (rows == 0) return;
  Handle space(DTUNE_H5_CHECK(H5Dget_space(dataset)), H5Sclose);
  const int rank = DTUNE_H5_CHECK(H5Sget_simple_extent_ndims(space.get()));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  DTUNE_H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
  std::vector<hsize_t> start(dims.size(), 0), count(dims);
  start[0] = dims[0];
  count[0] = rows;
  dims[0] += rows;
  DTUNE_H5_CHECK(H5Dset_extent(dataset, dims.data()));
  Handle file_space(DTUNE_H5_CHECK(H5Dget_space(dataset)), H5Sclose);
  DTUNE_H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                     count.data(), nullptr));
  Handle mem_space(DTUNE_H5_CHECK(H5Screate_simple(rank, count.data(), nullptr)), H5Sclose);
  DTUNE_H5_CHECK(H5Dwrite(dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, data));
}

void flush(hid_t file) { DTUNE_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL)); }

}  // namespace dtune::h5
