// bfloat16: the upper 16 bits of an IEEE-754 float (1 sign, 8 exponent, 7
// mantissa bits), float's range at 8 significant bits. attograd stores and
// converts it (DType::bf16) but computes in f32: see dtype.h.
//
// The conversions are PyTorch's, bit for bit (c10/util/BFloat16.h and
// BFloat16-inl.h, checked at pytorch/pytorch 00b01c16):
//  - f32 -> bf16 is c10::detail::round_to_nearest_even: every NaN becomes the
//    quiet NaN 0x7FC0 (sign and payload dropped); any other value, as bits u,
//    becomes (u + 0x7FFF + bit 16 of u) >> 16: round to nearest, ties to the
//    even neighbour, a carry out of the mantissa moves into the exponent (so
//    values past the largest bf16 round to ±inf) and subnormals round like
//    any other value;
//  - bf16 -> f32 shifts the 16 bits into the upper half: exact;
//  - everything else goes through float, as c10::BFloat16, whose only
//    converting constructor takes a float: f64 -> bf16 rounds to f32 first,
//    then to bf16 (double rounding: 1 + 2^-8 + 2^-40 becomes 1.0, where one
//    rounding would give 1 + 2^-7), and i64 -> bf16 likewise.
// torch's vectorised tensor conversion (x.to(torch.bfloat16) on the CPU)
// agrees bit for bit except on NaN, which it writes as 0xFFFF (seen with
// torch 1.13 on AVX2; tests/test_bf16.cpp checks both when torch is there).
#pragma once
#include <bit>
#include <cstdint>
#include <type_traits>

namespace attograd {

// f32 -> bf16 bits, rounded as PyTorch rounds (see above).
constexpr uint16_t bf16_bits_from_float(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  // NaN tested on the bits, so no floating-point flag changes the answer; a
  // select, not a branch, so a loop of conversions vectorizes.
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u : rounded);
}

// bf16 bits -> f32, exactly.
constexpr float float_from_bf16_bits(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// One bf16 element as a DType::bf16 tensor stores it (2 bytes, the bits).
// It converts to and from arithmetic types explicitly (static_cast) and has
// no arithmetic or comparison operators, so no kernel can compute in bf16
// by accident: an op instantiated for it fails to compile.
struct BFloat16 {
  // The 16 bits as stored: sign, 8 exponent bits, 7 mantissa bits.
  uint16_t bits;

  // Uninitialised, as a float is (so vectors of it need no fill).
  BFloat16() = default;
  // x rounded to bf16; a non-float x is converted to float first (see above).
  template <class T>
    requires std::is_arithmetic_v<T>
  constexpr explicit BFloat16(T x) : bits(bf16_bits_from_float(static_cast<float>(x))) {}
  // The element whose bits are `raw`, unchanged.
  static constexpr BFloat16 from_bits(uint16_t raw) {
    BFloat16 b{};
    b.bits = raw;
    return b;
  }
  // The value as a float (exact), then as T.
  template <class T>
    requires std::is_arithmetic_v<T>
  constexpr explicit operator T() const { return static_cast<T>(float_from_bf16_bits(bits)); }
};
static_assert(sizeof(BFloat16) == 2 && std::is_trivially_copyable_v<BFloat16>);

}  // namespace attograd
