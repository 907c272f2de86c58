// Balanced contiguous partition of a model's pieces.
#include "train/pipeline/partition.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace dtune::train {

std::vector<size_t> partition_pieces(const std::vector<PieceCost>& pieces, int chunks,
                                     bool ends_apart) {
  // Units: (first piece, cost). One per block, the kFirst pieces added to the first unit and the
  // kLast ones to the last; with ends_apart, the kFirst and the kLast pieces each a unit.
  std::vector<std::pair<size_t, double>> units;
  size_t blocks = 0;
  double first = 0, last = 0;
  size_t last_begin = pieces.size();
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].kind == models::PieceKind::kBlock) {
      units.push_back({i, pieces[i].cost});
      ++blocks;
    } else if (blocks == 0) {
      first += pieces[i].cost;
    } else {
      last += pieces[i].cost;
      last_begin = std::min(last_begin, i);
    }
  }
  if (ends_apart) {
    if (!units.empty() && units.front().first > 0) units.insert(units.begin(), {0, first});
    if (last_begin < pieces.size()) units.push_back({last_begin, last});
  } else if (!units.empty()) {
    units.front().second += first;
    units.back().second += last;
  }
  const size_t B = units.size(), K = static_cast<size_t>(chunks);
  if (K > B)
    throw UsageError("--pipeline-stages x --virtual-stages = " + std::to_string(K) +
                     " chunks but the model has " + std::to_string(blocks) + " blocks" +
                     (ends_apart ? " and its ends (" + std::to_string(B) + " pieces to cut between)"
                                 : std::string()) +
                     ": give at most one chunk per block (fewer stages, or a deeper model)");
  std::vector<double> prefix(B + 1, 0);
  for (size_t j = 0; j < B; ++j) prefix[j + 1] = prefix[j] + units[j].second;
  // best[k][j]: the least possible maximum chunk cost of units [0, j) cut into k chunks.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(K + 1, std::vector<double>(B + 1, kInf));
  std::vector<std::vector<size_t>> from(K + 1, std::vector<size_t>(B + 1, 0));
  best[0][0] = 0;
  for (size_t k = 1; k <= K; ++k)
    for (size_t j = k; j <= B; ++j)
      for (size_t i = k - 1; i < j; ++i) {
        const double c = std::max(best[k - 1][i], prefix[j] - prefix[i]);
        if (c < best[k][j]) best[k][j] = c, from[k][j] = i;
      }
  std::vector<size_t> unit_starts(K);
  for (size_t k = K, j = B; k > 0; --k) {
    unit_starts[k - 1] = from[k][j];
    j = from[k][j];
  }
  std::vector<size_t> starts(K);
  for (size_t k = 0; k < K; ++k) starts[k] = k == 0 ? 0 : units[unit_starts[k]].first;
  return starts;
}

std::string describe_cuts(const std::vector<models::Piece>& pieces,
                          const std::vector<size_t>& starts) {
  std::string out;
  for (size_t k = 0; k < starts.size(); ++k) {
    const size_t end = k + 1 < starts.size() ? starts[k + 1] : pieces.size();
    if (k > 0) out += " | ";
    for (size_t i = starts[k]; i < end; ++i) out += (i > starts[k] ? "," : "") + pieces[i].name;
  }
  return out;
}

}  // namespace dtune::train
