// RAII handles for HDF5 objects and the few writing helpers dtune needs: scalar attributes,
// string attributes, and chunked, gzip + shuffle compressed datasets of numbers and strings.
// HDF5's automatic error printing is turned off; failures throw through DTUNE_H5_CHECK.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dtune::h5 {

// An owned hid_t with its matching close function. Copy deleted; moved-from is empty.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept;
  ~Handle() { close(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void close() noexcept;  // logs, never throws

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Silence HDF5's own error printing for this process (errors are reported by dtune).
void quiet_errors();

Handle create_file(const std::string& path);  // truncates
Handle open_file_rw(const std::string& path);
Handle create_group(hid_t parent, const std::string& name);
Handle open_group(hid_t parent, const std::string& name);

void write_attr(hid_t obj, const std::string& name, const std::string& value);
void write_attr(hid_t obj, const std::string& name, const char* value);
void write_attr(hid_t obj, const std::string& name, int64_t value);
void write_attr(hid_t obj, const std::string& name, int value);
void write_attr(hid_t obj, const std::string& name, double value);

// N-dimensional datasets, chunked and compressed with shuffle + gzip when larger than a few
// elements (h5py and every HDF5 reader decode these filters).
void write_dataset(hid_t parent, const std::string& name, const std::vector<hsize_t>& dims,
                   const double* data);
void write_dataset(hid_t parent, const std::string& name, const std::vector<hsize_t>& dims,
                   const int64_t* data);
void write_strings(hid_t parent, const std::string& name, const std::vector<std::string>& values);

// A dataset of rows that grows as rows are measured: shape [0, cols...] at first, unlimited along
// the first dimension, chunked (a chunk holds whole rows) and compressed; append_rows() extends it
// by `rows` rows and writes them (rows × Π cols elements, row-major). Readers see a plain
// [S, cols...] dataset, the same as write_dataset() would have made.
Handle create_rows(hid_t parent, const std::string& name, const std::vector<hsize_t>& cols,
                   hid_t type);
void append_rows(hid_t dataset, hsize_t rows, hid_t mem_type, const void* data);

void flush(hid_t file);

}  // namespace dtune::h5
