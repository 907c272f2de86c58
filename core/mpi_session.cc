// MPI session and communicator handles.
#include "core/mpi_session.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace dtune {

MpiComm& MpiComm::operator=(MpiComm&& other) noexcept {
  if (this != &other) {
    this->~MpiComm();
    comm_ = other.release();
  }
  return *this;
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized && MPI_Comm_free(&comm_) != MPI_SUCCESS)
    std::fprintf(stderr, "dtune: warning: MPI_Comm_free failed (%s)\n", process_identity().c_str());
  comm_ = MPI_COMM_NULL;
}

MPI_Comm MpiComm::release() noexcept {
  MPI_Comm c = comm_;
  comm_ = MPI_COMM_NULL;
  return c;
}

int MpiComm::rank() const {
  int r = 0;
  DTUNE_MPI_CHECK(MPI_Comm_rank(comm_, &r));
  return r;
}

int MpiComm::size() const {
  int n = 0;
  DTUNE_MPI_CHECK(MPI_Comm_size(comm_, &n));
  return n;
}

MpiComm MpiComm::dup(MPI_Comm comm) {
  MPI_Comm out = MPI_COMM_NULL;
  DTUNE_MPI_CHECK(MPI_Comm_dup(comm, &out));
  DTUNE_MPI_CHECK(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return MpiComm(out);
}

MpiSession::MpiSession(int* argc, char*** argv) {
  // THREAD_MULTIPLE lets the watchdog thread call MPI_Abort while the main thread is inside a
  // collective; if the library offers less, the watchdog falls back to _exit (mpirun then kills
  // the job).
  //
  // A singleton (a binary started without a launcher) is not started isolated
  // (OMPI_MCA_ess_singleton_isolated=1, no orted daemon, 0.15 s less a start): Open MPI 4's
  // isolated singletons race each other on the shared session folder /tmp/ompi.<host>.<uid> (one
  // removes it empty while another creates its own beneath it: "orte_session_dir failed"), 8 of 800
  // starts of 8 concurrent singletons failed so, and none of 800 with the daemon.
  DTUNE_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  set_process_identity(rank, host);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && MPI_Finalize() != MPI_SUCCESS)
    std::fprintf(stderr, "dtune: warning: MPI_Finalize failed (%s)\n", process_identity().c_str());
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<size_t>(std::max(len, 0)));
  // Open MPI appends the repository and date on further lines; keep the first line, trimmed.
  s = s.substr(0, s.find('\n'));
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ' || s.back() == ',')) s.pop_back();
  return s;
}

std::string mpi_standard_version() {
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace dtune
