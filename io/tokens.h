// Token files (pre-tokenised training data). Format, documented in docs/FORMATS.md:
// 16-byte header: 8 bytes magic "STRATOK1", u32 LE bytes_per_token (2 or 4), u32 LE reserved (0);
// then little-endian unsigned token ids of that width, count = (file_size-16)/bytes_per_token.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::io {

// FormatError naming the file: bad magic, bad width, size not a multiple of the width, a token
// id >= vocab_size, or fewer than `min_tokens` tokens. IoError if the file cannot be read.
std::vector<int32_t> read_tokens(const std::string& path, int vocab_size, long min_tokens);
// Atomic (temp + fsync + rename), 4 bytes per token. Negative ids are rejected.
void write_tokens(const std::string& path, const std::vector<int32_t>& tokens);

}  // namespace strata::io
