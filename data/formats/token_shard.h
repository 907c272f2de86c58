// Token shards in the llm.c / nanoGPT convention: a 1024-byte header of 256 little-endian int32
// (header[0] = 20240520 magic, header[1] = 1 version, header[2] = number of tokens), then the
// tokens as uint16. A training sample of context T is T + 1 consecutive tokens (the input, and
// the target shifted by one); windows start every T tokens within a shard. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtune::data {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int64_t kTokenHeaderBytes = 1024;

std::string encode_token_shard(const std::vector<uint16_t>& tokens);
// Number of tokens a shard declares; throws dtune::Error on a bad magic or version.
int64_t token_shard_count(const std::string& header_bytes, const std::string& what);

// Byte-level tokenizer (vocabulary 256): every byte of the text is a token.
std::vector<uint16_t> byte_tokens(const std::string& text);

}  // namespace dtune::data
