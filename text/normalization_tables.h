// The Unicode data of the NFC/NFD/NFKC/NFKD normalizers, as Hugging Face tokenizers has it. The
// tables are generated (text/gen_normalization_tables.py); text/normalize.cpp runs the algorithm.
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata::text {

// Quick-check flags of a code point: "No" where the form changes the code point alone; Maybe
// where it is the second of a canonical composition (it may compose with what precedes it).
enum NormFlag : uint8_t {
  kNfdNo = 1,
  kNfkdNo = 2,
  kNfcNo = 4,
  kNfkcNo = 8,
  kComposeMaybe = 16,
};

struct NormRecord {
  uint16_t canon_off, compat_off;  // into kNormData: the full decompositions, canonically ordered
  uint8_t canon_len, compat_len;   // 0: none (compat_len covers canonical-only code points too)
  uint8_t ccc;                     // canonical combining class
  uint8_t flags;                   // NormFlag bits
};

struct NormPair {
  uint32_t first, second, composite;  // sorted by (first, second); Hangul is algorithmic
};

// Code point c < kNormLimit has record kNormRecords[kNormStage2[kNormStage1[c >> 7] * 128 + (c & 127)]];
// every other code point has record 0 (a starter with no decomposition).
extern const uint32_t kNormLimit;
extern const uint16_t kNormStage1[];
extern const uint16_t kNormStage2[];
extern const NormRecord kNormRecords[];
extern const uint32_t kNormData[];
extern const NormPair kNormPairs[];
extern const size_t kNormPairCount;

inline const NormRecord& norm_record(uint32_t c) {
  if (c >= kNormLimit) return kNormRecords[0];
  return kNormRecords[kNormStage2[size_t(kNormStage1[c >> 7]) * 128 + (c & 127)]];
}

}  // namespace strata::text
