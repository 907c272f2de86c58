// Gathering per-rank values to rank 0 (results are written by rank 0 only: no parallel HDF5).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace dtune {

// Every rank passes its string; rank 0 gets all of them (index = rank), other ranks get {}.
std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& mine);
// Every rank passes `mine` (same length on every rank); rank 0 gets them concatenated by rank.
std::vector<double> gather_doubles(MPI_Comm comm, const std::vector<double>& mine);
std::vector<long long> gather_longs(MPI_Comm comm, const std::vector<long long>& mine);
// Broadcast a string from rank 0 (for decisions only rank 0 can make, like creating a file).
std::string broadcast_string(MPI_Comm comm, const std::string& value);

}  // namespace dtune
