// A seedable random generator (xoshiro256**, seeded through splitmix64).
// Every random function takes one explicitly, so a seed reproduces a run bit
// for bit; its whole state is four 64-bit words that a checkpoint can save.
#pragma once
#include <array>
#include <cstdint>

namespace attograd {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  uint64_t next_u64();
  double uniform();       // [0, 1), 53 random bits
  double normal();        // N(0, 1), Box-Muller on two uniforms
  uint64_t randint(uint64_t n);  // [0, n), unbiased

  using State = std::array<uint64_t, 4>;
  State state() const { return s_; }
  void set_state(const State& s) { s_ = s; }

 private:
  State s_{};
};

}  // namespace attograd
