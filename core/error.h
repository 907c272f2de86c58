// Errors for all of dtune: one exception hierarchy and the check macros that turn a library's
// return code into an exception carrying the expression, file:line, rank, host and the library's
// own message. Library code throws; only main() catches (see core/main_guard.h), prints on the
// failing rank and aborts the job so no rank is left waiting in a collective.
// DTUNE_CUDA_CHECK and DTUNE_NCCL_CHECK live in core/cuda/cuda_error.h (compiled only with CUDA).
#pragma once

#include <stdexcept>
#include <string>

namespace dtune {

// A failure of the run itself (a library call failed, a rank timed out, a file is corrupt). Exit 1.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input from the user (a flag value, an impossible size, an unwritable path). Exit 2, one line.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A wait that ran past its deadline (a collective, an arrival check). Exit 3 after aborting.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// The job is already being ended by another rank, which printed why (core/rank_board.h
// ended_by): this rank ends with `code` and prints nothing, so the job's end is explained once.
class EndedElsewhere : public Error {
 public:
  EndedElsewhere(const std::string& by, int code) : Error("ended by " + by), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Who this process is, for error messages: set once by MpiSession after MPI_Init, read-only after.
// Before MPI is up: the rank the launcher assigned (from its environment) and the host name.
void set_process_identity(int rank, const std::string& host);
std::string process_identity();

namespace detail {
[[noreturn]] void raise_library_error(const char* library, const char* expr,
                                      const std::string& message, const char* file, int line);
[[noreturn]] void raise_mpi_error(const char* expr, int code, const char* file, int line);
[[noreturn]] void raise_h5_error(const char* expr, const char* file, int line);
}  // namespace detail

}  // namespace dtune

// Never tied to NDEBUG: these are run-time checks of library calls, not assertions.
#define DTUNE_MPI_CHECK(expr)                                                     \
  do {                                                                            \
    const int dtune_mpi_rc_ = (expr);                                             \
    if (dtune_mpi_rc_ != 0 /* MPI_SUCCESS */)                                     \
      ::dtune::detail::raise_mpi_error(#expr, dtune_mpi_rc_, __FILE__, __LINE__); \
  } while (0)

// HDF5 calls return a negative herr_t/hid_t on failure; the message comes from HDF5's error stack.
#define DTUNE_H5_CHECK(expr)                                                          \
  ([&]() {                                                                            \
    auto dtune_h5_rc_ = (expr);                                                       \
    if (dtune_h5_rc_ < 0) ::dtune::detail::raise_h5_error(#expr, __FILE__, __LINE__); \
    return dtune_h5_rc_;                                                              \
  }())

// A plain condition check with a message, for invariants of dtune's own code and inputs.
#define DTUNE_CHECK(cond, message)                                                         \
  do {                                                                                     \
    if (!(cond))                                                                           \
      ::dtune::detail::raise_library_error("dtune", #cond, (message), __FILE__, __LINE__); \
  } while (0)
