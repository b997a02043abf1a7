// SHA-256 as FIPS 180-4 writes it; HMAC as RFC 2104 (64-byte block).
#include "engine/hmac.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "engine/error.h"

namespace strata {

namespace {

constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

void compress(uint32_t h[8], const uint8_t* block) {  // one 64-byte block
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = uint32_t(block[4 * i]) << 24 | uint32_t(block[4 * i + 1]) << 16 | uint32_t(block[4 * i + 2]) << 8 |
           uint32_t(block[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] + w[i];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

}  // namespace

Digest sha256(std::span<const uint8_t> data) {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  size_t i = 0;
  for (; i + 64 <= data.size(); i += 64) compress(h, data.data() + i);
  uint8_t tail[128] = {};
  const size_t rest = data.size() - i;
  if (rest) std::memcpy(tail, data.data() + i, rest);
  tail[rest] = 0x80;
  const size_t blocks = rest + 9 <= 64 ? 1 : 2;
  const uint64_t bits = uint64_t(data.size()) * 8;
  for (int b = 0; b < 8; ++b) tail[64 * blocks - 1 - b] = uint8_t(bits >> (8 * b));
  for (size_t b = 0; b < blocks; ++b) compress(h, tail + 64 * b);
  Digest out;
  for (int j = 0; j < 8; ++j)
    for (int b = 0; b < 4; ++b) out[size_t(4 * j + b)] = uint8_t(h[j] >> (24 - 8 * b));
  return out;
}

Digest hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> message) {
  uint8_t k[64] = {};
  if (key.size() > 64) {
    const Digest d = sha256(key);
    std::memcpy(k, d.data(), d.size());
  } else if (!key.empty()) {
    std::memcpy(k, key.data(), key.size());
  }
  std::vector<uint8_t> inner(64 + message.size());
  for (int i = 0; i < 64; ++i) inner[size_t(i)] = k[i] ^ 0x36;
  if (!message.empty()) std::memcpy(inner.data() + 64, message.data(), message.size());
  const Digest ih = sha256(inner);
  uint8_t outer[64 + 32];
  for (int i = 0; i < 64; ++i) outer[i] = k[i] ^ 0x5c;
  std::memcpy(outer + 64, ih.data(), ih.size());
  return sha256(outer);
}

bool constant_time_equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return false;  // sizes are public (a MAC is always 32 bytes)
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = uint8_t(diff | (a[i] ^ b[i]));
  return diff == 0;
}

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t k = ::getrandom(out.data() + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) STRATA_THROW(IoError, std::string("getrandom failed: ") + std::strerror(errno), "getrandom");
    got += size_t(k);
  }
  return out;
}

std::string to_hex(std::span<const uint8_t> bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) s += kHex[b >> 4], s += kHex[b & 15];
  return s;
}

}  // namespace strata
