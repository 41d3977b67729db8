// Portable randomness: the same bits on every compiler, library and machine.
// std::*_distribution is implementation-defined, so nothing that must replay
// may use it; everything goes through these integer transforms instead.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvcheck {

// splitmix64 (Steele, Lea, Flood 2014): a counter through a bijective mixer.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [-1, 1) on a grid of 2^-23, exactly representable in float.
  double symmetric_unit() { return static_cast<double>(next() >> 40) * 0x1p-23 - 1.0; }

  // Uniform integer in [0, n) by Lemire's multiply-shift; n > 0.
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }

  // Uniform integer in [lo, hi], inclusive.
  int64_t in_range(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }

 private:
  uint64_t state_;
};

// FNV-1a over a name, so each tensor gets its own stream and adding a tensor
// never shifts the values of another. Passing the previous result as `h`
// continues the hash over more bytes (a checkpoint's files, one by one).
inline constexpr uint64_t kFnv1a64Basis = 0xCBF29CE484222325ull;
inline uint64_t fnv1a64(std::string_view text, uint64_t h = kFnv1a64Basis) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

}  // namespace kvcheck
