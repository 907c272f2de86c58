// RAII for MPI: the session (MPI_Init_thread / MPI_Finalize) and owned communicators. Errors on
// MPI_COMM_WORLD are made to return (MPI_ERRORS_RETURN) so that DTUNE_MPI_CHECK can name them.
#pragma once

#include <mpi.h>

#include <string>

namespace dtune {

// An owned communicator (MPI_Comm_free on destruction). Copy deleted; moved-from is empty.
class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {}
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MpiComm(MpiComm&& other) noexcept : comm_(other.release()) {}
  MpiComm& operator=(MpiComm&& other) noexcept;
  ~MpiComm();

  MPI_Comm get() const { return comm_; }
  MPI_Comm release() noexcept;
  int rank() const;
  int size() const;

  static MpiComm dup(MPI_Comm comm);

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// MPI_Init_thread on construction, MPI_Finalize on destruction (unless aborted). One per process.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  ~MpiSession();

  int thread_level() const { return thread_level_; }

 private:
  int thread_level_ = MPI_THREAD_SINGLE;
};

// MPI library identification (MPI_Get_library_version), single line.
std::string mpi_library_version();
// "3.1" from MPI_Get_version.
std::string mpi_standard_version();

}  // namespace dtune
