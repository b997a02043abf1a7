// SHA-256 and HMAC-SHA-256 (FIPS 180-4, RFC 2104) for the rendezvous' challenge-response: a rank proves
// it holds the job secret without sending it. Small inputs only (a handshake), so no speed tricks.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace strata {

using Digest = std::array<uint8_t, 32>;

Digest sha256(std::span<const uint8_t> data);
Digest hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> message);

// Compares in time independent of where the inputs first differ (a timing side channel must not
// reveal how much of a MAC was right).
bool constant_time_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

// `n` bytes from the kernel's random source (getrandom); IoError when it fails.
std::string random_bytes(size_t n);

// Lower-case hex of `bytes`.
std::string to_hex(std::span<const uint8_t> bytes);

}  // namespace strata
