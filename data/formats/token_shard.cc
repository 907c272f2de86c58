// llm.c token shards (see token_shard.h).
#include "data/formats/token_shard.h"

#include <cstring>

#include "core/error.h"

namespace dtune::data {

std::string encode_token_shard(const std::vector<uint16_t>& tokens) {
  std::string out(kTokenHeaderBytes + tokens.size() * 2, '\0');
  int32_t header[256] = {};
  header[0] = kTokenShardMagic;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::memcpy(out.data(), header, sizeof header);  // little-endian hosts only (x86, arm64)
  if (!tokens.empty())
    std::memcpy(out.data() + kTokenHeaderBytes, tokens.data(), tokens.size() * 2);
  return out;
}

int64_t token_shard_count(const std::string& header_bytes, const std::string& what) {
  if (header_bytes.size() < static_cast<size_t>(kTokenHeaderBytes))
    throw Error(what + ": shorter than the 1024-byte token-shard header");
  int32_t header[3];
  std::memcpy(header, header_bytes.data(), sizeof header);
  if (header[0] != kTokenShardMagic)
    throw Error(what + ": not a token shard (magic " + std::to_string(header[0]) +
                ", expected 20240520)");
  if (header[1] != 1)
    throw Error(what + ": token-shard version " + std::to_string(header[1]) + " (only 1 is known)");
  return header[2];
}

std::vector<uint16_t> byte_tokens(const std::string& text) {
  return std::vector<uint16_t>(reinterpret_cast<const unsigned char*>(text.data()),
                               reinterpret_cast<const unsigned char*>(text.data()) + text.size());
}

}  // namespace dtune::data
