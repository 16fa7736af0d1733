// A seedable random generator (xoshiro256**, seeded through splitmix64).
// Every random function takes one explicitly, so a seed reproduces a run bit
// for bit; its whole state is four 64-bit words that a checkpoint can save.
#pragma once
#include <array>
#include <cstdint>

namespace attograd {

// The random source every random function takes (see above).
class Generator {
 public:
  // Seeded with seed; equal seeds give equal sequences on every machine.
  explicit Generator(uint64_t seed = 0x5eed) { manual_seed(seed); }
  // Restarts the sequence from seed (the state is set through splitmix64).
  void manual_seed(uint64_t seed);
  // The next 64 random bits; the other draws are made from these.
  uint64_t next_u64();
  double uniform();       // [0, 1), 53 random bits
  double normal();        // N(0, 1), Box-Muller on two uniforms
  uint64_t randint(uint64_t n);  // [0, n), unbiased

  // The whole state: four 64-bit words.
  using State = std::array<uint64_t, 4>;
  // The four words that make the whole state, for a checkpoint.
  State state() const { return s_; }
  // Continues the sequence from a saved state().
  void set_state(const State& s) { s_ = s; }

 private:
  State s_{};
};

}  // namespace attograd
