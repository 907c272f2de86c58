// The order a loader visits samples in, per epoch: shards (objects) shuffled, then the samples
// within each shard shuffled (WebDataset's shard-then-sample shuffling: reads stay shard-local),
// deterministic for (seed, epoch) and different between epochs; rank r of N takes the contiguous
// slice [r*M/N, (r+1)*M/N) of that order, so the ranks see disjoint sets that together are the
// whole epoch and each touches about 1/N of the shards. Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "data/formats/dataset.h"

namespace dtune::data {

// SplitMix64 of the inputs: independent, reproducible streams per (seed, epoch[, sample]).
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

// Sample indices (into `samples`) in epoch order.
std::vector<int64_t> epoch_order(const std::vector<SampleRef>& samples, size_t objects,
                                 uint64_t seed, int epoch);

// This rank's part of `order`.
std::vector<int64_t> rank_slice(const std::vector<int64_t>& order, int rank, int world);

}  // namespace dtune::data
