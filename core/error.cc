// Formatting of library errors with rank and host. The process identity is written once, right
// after MPI_Init (before any other thread exists), and only read afterwards.
#include "core/error.h"

#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

namespace dtune {
namespace {
std::mutex& identity_mutex() {
  static std::mutex m;
  return m;
}
// Before MPI is up, the launcher has already said which rank this process will be (Open MPI,
// PMIx, Slurm, MPICH's PMI, in that order) and the host has a name: a message from inside
// MPI_Init_thread names both rather than "rank ?".
std::string identity_before_mpi() {
  std::string rank = "?";
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "PMI_RANK"}) {
    if (const char* v = std::getenv(var); v && *v) {
      rank = v;
      break;
    }
  }
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) std::snprintf(host, sizeof host, "?");
  return "rank " + rank + " on " + host + ", before MPI_Init finished";
}
std::string& identity_storage() {
  static std::string s = identity_before_mpi();
  return s;
}
}  // namespace

void set_process_identity(int rank, const std::string& host) {
  std::lock_guard<std::mutex> lock(identity_mutex());
  identity_storage() = "rank " + std::to_string(rank) + " on " + host;
}

std::string process_identity() {
  std::lock_guard<std::mutex> lock(identity_mutex());
  return identity_storage();
}

namespace detail {

void raise_library_error(const char* library, const char* expr, const std::string& message,
                         const char* file, int line) {
  std::ostringstream os;
  os << library << " error: " << message << " [" << expr << " at " << file << ":" << line << ", "
     << process_identity() << "]";
  throw Error(os.str());
}

void raise_mpi_error(const char* expr, int code, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "code %d", code);
  raise_library_error("MPI", expr, text, file, line);
}

void raise_h5_error(const char* expr, const char* file, int line) {
  // Walk HDF5's error stack from the innermost call outwards and keep the most specific message.
  std::string message;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* err, void* data) -> herr_t {
        auto* out = static_cast<std::string*>(data);
        if (n == 0 && err->desc) *out = err->desc;
        return 0;
      },
      &message);
  H5Eclear2(H5E_DEFAULT);
  if (message.empty()) message = "HDF5 call failed";
  raise_library_error("HDF5", expr, message, file, line);
}

}  // namespace detail
}  // namespace dtune
