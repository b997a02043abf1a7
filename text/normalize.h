// Unicode normalization (NFC, NFD, NFKC, NFKD) as Hugging Face tokenizers' normalizers of those
// names do it, with its Unicode data (text/normalization_tables.h). Offsets are not tracked.
#pragma once
#include <string>
#include <string_view>

namespace strata::text {

enum class NormForm : uint8_t { kNFC, kNFD, kNFKC, kNFKD };

// Normalizes s (valid UTF-8). Returns false, leaving `out` as it was, where s is already in the
// form (the common case: a quick check over ASCII and NFC_Quick_Check=Yes text, no copy); else
// sets `out` to the normalized text and returns true.
bool normalize_unicode(std::string_view s, NormForm form, std::string& out);

// The normalized text (a copy of s where it is already normalized).
std::string normalized(std::string_view s, NormForm form);

}  // namespace strata::text
