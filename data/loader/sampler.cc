// Epoch order and per-rank slices (see sampler.h).
#include "data/loader/sampler.h"

#include <algorithm>
#include <random>

namespace dtune::data {

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
  auto splitmix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  return splitmix(splitmix(splitmix(a) ^ b) ^ c);
}

std::vector<int64_t> epoch_order(const std::vector<SampleRef>& samples, size_t objects,
                                 uint64_t seed, int epoch) {
  std::vector<std::vector<int64_t>> by_object(objects);
  for (size_t i = 0; i < samples.size(); ++i)
    by_object[samples[i].object].push_back(static_cast<int64_t>(i));
  std::mt19937_64 rng(mix_seed(seed, static_cast<uint64_t>(epoch)));
  std::vector<size_t> shard(objects);
  for (size_t i = 0; i < objects; ++i) shard[i] = i;
  std::shuffle(shard.begin(), shard.end(), rng);
  std::vector<int64_t> order;
  order.reserve(samples.size());
  for (size_t o : shard) {
    auto& s = by_object[o];
    std::shuffle(s.begin(), s.end(), rng);
    order.insert(order.end(), s.begin(), s.end());
  }
  return order;
}

std::vector<int64_t> rank_slice(const std::vector<int64_t>& order, int rank, int world) {
  const size_t m = order.size();
  const size_t lo = m * static_cast<size_t>(rank) / static_cast<size_t>(world);
  const size_t hi = m * static_cast<size_t>(rank + 1) / static_cast<size_t>(world);
  return std::vector<int64_t>(order.begin() + static_cast<long>(lo),
                              order.begin() + static_cast<long>(hi));
}

}  // namespace dtune::data
