// Unicode normalization (NFC, NFD, NFKC, NFKD) as Hugging Face tokenizers' normalizers of those
// names do it, with its Unicode data (text/normalization_tables.h).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::text {

enum class NormForm : uint8_t { kNFC, kNFD, kNFKC, kNFKD };

// Normalizes s (valid UTF-8). Returns false, leaving `out` as it was, where s is already in the
// form (the common case: a quick check over ASCII and NFC_Quick_Check=Yes text, no copy); else
// sets `out` to the normalized text and returns true.
// Where `changes` is given and the text changes, it is set to one value per character of `out`, as
// tokenizers' alignment crate gives them: 0 where it stands for one character of s, 1 where it is
// added, -n where it absorbs n more (a composite). Offsets follow from them by position.
bool normalize_unicode(std::string_view s, NormForm form, std::string& out, std::vector<int32_t>* changes = nullptr);

// The normalized text (a copy of s where it is already normalized).
std::string normalized(std::string_view s, NormForm form);

}  // namespace strata::text
