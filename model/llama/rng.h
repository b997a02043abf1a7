// A small deterministic generator (splitmix64 + Box-Muller) so checkpoints made by
// strata-make-tiny and LoRA inits are the same on every platform and library version.
#pragma once
#include <cmath>
#include <cstdint>

namespace strata {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Two normals from one pair of uniforms (Box-Muller's cosine and sine) in float arithmetic: a third of the time of
  // two normal() calls, for fills of billions of weights (the draws keep double resolution: tails to 8.6 sigma).
  void normal_pair(float& a, float& b) {
    double u1 = uniform();
    const double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    const float r = std::sqrt(-2.0f * std::log(float(u1))), t = 6.2831853f * float(u2);
    a = r * std::cos(t);
    b = r * std::sin(t);
  }
  int below(int n) { return int(next() % uint64_t(n)); }
  // Skips n draws of next() (normal() takes two): the state only advances by a constant, so a
  // generator can start anywhere in its sequence (parallel fills of one stream, same numbers).
  void skip(uint64_t n) { s_ += n * 0x9E3779B97F4A7C15ull; }
  // The whole state, for checkpoints: a generator set to a saved state continues its sequence exactly.
  uint64_t state() const { return s_; }
  void set_state(uint64_t s) { s_ = s; }

 private:
  uint64_t s_;
};

}  // namespace strata
