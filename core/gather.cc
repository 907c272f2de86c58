// Gathers and broadcasts of variable-length data.
#include "core/gather.h"

#include "core/error.h"

namespace dtune {

std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& mine) {
  int rank = 0, n = 1;
  DTUNE_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  DTUNE_MPI_CHECK(MPI_Comm_size(comm, &n));
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(rank == 0 ? n : 0), displs(rank == 0 ? n : 0);
  DTUNE_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm));
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int i = 0; i < n; ++i) {
      displs[i] = total;
      total += lens[i];
    }
    all.resize(static_cast<size_t>(total));
  }
  DTUNE_MPI_CHECK(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(),
                              MPI_CHAR, 0, comm));
  std::vector<std::string> out;
  if (rank == 0)
    for (int i = 0; i < n; ++i) out.push_back(all.substr(displs[i], lens[i]));
  return out;
}

namespace {
template <typename T>
std::vector<T> gather_fixed(MPI_Comm comm, const std::vector<T>& mine, MPI_Datatype type) {
  int rank = 0, n = 1;
  DTUNE_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  DTUNE_MPI_CHECK(MPI_Comm_size(comm, &n));
  std::vector<T> out(rank == 0 ? mine.size() * static_cast<size_t>(n) : 0);
  DTUNE_MPI_CHECK(MPI_Gather(mine.data(), static_cast<int>(mine.size()), type, out.data(),
                             static_cast<int>(mine.size()), type, 0, comm));
  return out;
}
}  // namespace

std::vector<double> gather_doubles(MPI_Comm comm, const std::vector<double>& mine) {
  return gather_fixed(comm, mine, MPI_DOUBLE);
}
std::vector<long long> gather_longs(MPI_Comm comm, const std::vector<long long>& mine) {
  return gather_fixed(comm, mine, MPI_LONG_LONG);
}

std::string broadcast_string(MPI_Comm comm, const std::string& value) {
  int len = static_cast<int>(value.size());
  DTUNE_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, 0, comm));
  std::string out = value;
  out.resize(static_cast<size_t>(len));
  DTUNE_MPI_CHECK(MPI_Bcast(out.data(), len, MPI_CHAR, 0, comm));
  return out;
}

}  // namespace dtune
