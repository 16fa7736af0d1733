// DType::bf16, the storage dtype of issue 32: PyTorch's conversion bit for bit
// (hand vectors, an independent round-to-nearest reference, every bf16
// pattern, and PyTorch itself when /usr/bin/python3 has torch), tensors made
// in it and converted, printing, safetensors "BF16", and the refusals: no
// math, no grad.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numbers>
#include <span>
#include <string>
#include <vector>

#include <attograd/autograd/autograd.h>
#include <attograd/autograd/bfloat16.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/nn/linear.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_error;
using attograd::testing::TempDir;

namespace {

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

// A bf16 tensor of shape s holding exactly these bit patterns.
Tensor bf16_from_bits(const std::vector<uint16_t>& bits, const Shape& s) {
  Tensor t = Tensor::empty(s, DType::bf16);
  std::span<BFloat16> p = t.span<BFloat16>();
  for (size_t i = 0; i < bits.size(); ++i) p[i] = BFloat16::from_bits(bits[i]);
  return t;
}

// The bit patterns of a bf16 tensor, in logical order.
std::vector<uint16_t> bits_of(const Tensor& t) {
  std::vector<uint16_t> out;
  for (BFloat16 b : t.contiguous().span<BFloat16>()) out.push_back(b.bits);
  return out;
}

bool is_nan_bf16(uint16_t b) { return (b & 0x7FFF) > 0x7F80; }

// The bf16 nearest to x by value, ties to the even pattern, found by
// comparing distances in double: a reference that shares nothing with the
// bias trick of bf16_bits_from_float. |x| between the largest finite bf16
// and 2^128 (the next step of its binade) rounds to inf by the same rule.
uint16_t nearest_bf16(float x) {
  const uint32_t u = bits_of(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  if (std::isnan(x)) return 0x7FC0;
  if (std::isinf(x)) return static_cast<uint16_t>(u >> 16);
  const uint16_t lo = static_cast<uint16_t>((u >> 16) & 0x7FFF);  // |lo| <= |x| < |lo + 1|
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  const double ax = std::fabs(static_cast<double>(x));
  const double vlo = float_from_bf16_bits(lo);
  const double vhi = hi == 0x7F80 ? std::ldexp(1.0, 128) : static_cast<double>(float_from_bf16_bits(hi));
  const double below = ax - vlo, above = vhi - ax;  // exact: every value here fits a double
  const uint16_t mag = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<uint16_t>(sign | mag);
}

}  // namespace

// ---- the scalar conversion -------------------------------------------------------

// Each vector worked by hand from the rule, u = the float's bits:
// NaN -> 0x7FC0, else (u + 0x7FFF + ((u >> 16) & 1)) >> 16.
TEST(BFloat16, HandVectorsFromTheRule) {
  struct Case {
    uint32_t f32;
    uint16_t bf16;
    const char* what;
  };
  const Case cases[] = {
      // 0x3F800000 + 0x7FFF + 0 = 0x3F807FFF -> 0x3F80
      {0x3F800000, 0x3F80, "1.0"},
      // 0xBF800000 + 0x7FFF + 0 = 0xBF807FFF -> 0xBF80
      {0xBF800000, 0xBF80, "-1.0"},
      // 0x00000000 + 0x7FFF = 0x00007FFF -> 0x0000
      {0x00000000, 0x0000, "+0"},
      // 0x80000000 + 0x7FFF = 0x80007FFF -> 0x8000
      {0x80000000, 0x8000, "-0"},
      // FLT_MIN, the smallest normal: 0x00800000 + 0x7FFF = 0x00807FFF -> 0x0080
      {0x00800000, 0x0080, "smallest normal"},
      // the largest subnormal rounds up to FLT_MIN: 0x007FFFFF + 0x7FFF + 1 = 0x00807FFF -> 0x0080
      {0x007FFFFF, 0x0080, "largest subnormal"},
      // a subnormal bf16 keeps its bits: 0x00010000 + 0x7FFF + 1 = 0x00018000 -> 0x0001
      {0x00010000, 0x0001, "subnormal, exact"},
      // subnormal tie, odd 0x0001 rounds up: 0x00018000 + 0x7FFF + 1 = 0x00020000 -> 0x0002
      {0x00018000, 0x0002, "subnormal tie, up to even"},
      // subnormal tie, even 0x0000 stays: 0x00008000 + 0x7FFF = 0x0000FFFF -> 0x0000
      {0x00008000, 0x0000, "subnormal tie, down to even (0)"},
      // the smallest subnormal float: 0x00000001 + 0x7FFF = 0x00008000 -> 0x0000
      {0x00000001, 0x0000, "smallest subnormal to 0"},
      // +inf: 0x7F800000 + 0x7FFF + 0 = 0x7F807FFF -> 0x7F80
      {0x7F800000, 0x7F80, "+inf"},
      // -inf: 0xFF800000 + 0x7FFF + 0 = 0xFF807FFF -> 0xFF80
      {0xFF800000, 0xFF80, "-inf"},
      // NaNs: 0x7FC0 whatever the sign and payload (without the NaN test,
      // 0x7F800001 + 0x7FFF + 0 = 0x7F808000 -> 0x7F80 would be +inf, and
      // 0x7FFFFFFF + 0x7FFF + 1 = 0x80007FFF -> 0x8000 would be -0)
      {0x7FC00000, 0x7FC0, "quiet NaN"},
      {0x7F800001, 0x7FC0, "NaN with payload 1"},
      {0x7FFFFFFF, 0x7FC0, "NaN, all payload bits"},
      {0xFFC00000, 0x7FC0, "negative NaN"},
      {0xFF812345, 0x7FC0, "negative NaN with payload"},
      // tie at 1 + 2^-8, even 0x3F80 stays: 0x3F808000 + 0x7FFF + 0 = 0x3F80FFFF -> 0x3F80
      {0x3F808000, 0x3F80, "tie, down to even"},
      // tie at 1 + 3·2^-8, odd 0x3F81 rounds up: 0x3F818000 + 0x7FFF + 1 = 0x3F820000 -> 0x3F82
      {0x3F818000, 0x3F82, "tie, up to even"},
      // just above the tie: 0x3F808001 + 0x7FFF + 0 = 0x3F810000 -> 0x3F81
      {0x3F808001, 0x3F81, "just above a tie"},
      // just below the tie: 0x3F807FFF + 0x7FFF + 0 = 0x3F80FFFE -> 0x3F80
      {0x3F807FFF, 0x3F80, "just below a tie"},
      // 2 - 2^-23 carries into the exponent: 0x3FFFFFFF + 0x7FFF + 1 = 0x40007FFF -> 0x4000 (2.0)
      {0x3FFFFFFF, 0x4000, "carry into the exponent, to 2.0"},
      // 1 - 2^-24 carries too: 0x3F7FFFFF + 0x7FFF + 1 = 0x3F807FFF -> 0x3F80 (1.0)
      {0x3F7FFFFF, 0x3F80, "carry into the exponent, to 1.0"},
      // pi: 0x40490FDB + 0x7FFF + 1 = 0x40498FDB -> 0x4049 (3.140625)
      {0x40490FDB, 0x4049, "pi"},
      // 0.1f: 0x3DCCCCCD + 0x7FFF + 0 = 0x3DCD4CCC -> 0x3DCD (0.10009765625)
      {0x3DCCCCCD, 0x3DCD, "0.1"},
      // the largest finite bf16 stays: 0x7F7F0000 + 0x7FFF + 1 = 0x7F7F8000 -> 0x7F7F
      {0x7F7F0000, 0x7F7F, "largest finite bf16"},
      // just below its upper tie: 0x7F7F7FFF + 0x7FFF + 1 = 0x7F7FFFFF -> 0x7F7F
      {0x7F7F7FFF, 0x7F7F, "below the overflow tie"},
      // the overflow tie goes to even, which is inf: 0x7F7F8000 + 0x7FFF + 1 = 0x7F800000 -> 0x7F80
      {0x7F7F8000, 0x7F80, "overflow tie to +inf"},
      // FLT_MAX: 0x7F7FFFFF + 0x7FFF + 1 = 0x7F807FFF -> 0x7F80 (+inf)
      {0x7F7FFFFF, 0x7F80, "FLT_MAX to +inf"},
      // -FLT_MAX: 0xFF7FFFFF + 0x7FFF + 1 = 0xFF807FFF -> 0xFF80 (-inf)
      {0xFF7FFFFF, 0xFF80, "-FLT_MAX to -inf"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(bf16_bits_from_float(float_of(c.f32)), c.bf16) << c.what;
    EXPECT_EQ(BFloat16(float_of(c.f32)).bits, c.bf16) << c.what;
    EXPECT_EQ(nearest_bf16(float_of(c.f32)), c.bf16) << c.what << " (reference)";
  }
  // The whole table through a tensor: .to(bf16) gives the same bits.
  std::vector<float> xs;
  std::vector<uint16_t> want;
  for (const Case& c : cases) {
    xs.push_back(float_of(c.f32));
    want.push_back(c.bf16);
  }
  const Tensor t = Tensor::from_vector(xs, {static_cast<int64_t>(xs.size())}).to(DType::bf16);
  EXPECT_EQ(t.dtype(), DType::bf16);
  EXPECT_EQ(bits_of(t), want);
}

// For every sign, exponent and upper mantissa (all 2^16 upper halves) and the
// lower halves around and at the rounding points, the bias rule agrees with
// rounding to the nearest value by distance.
TEST(BFloat16, AgreesWithNearestByValue) {
  const uint32_t lows[] = {0x0000, 0x0001, 0x4000, 0x7FFE, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF};
  int64_t checked = 0;
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : lows) {
      const float x = float_of(hi << 16 | lo);
      const uint16_t got = bf16_bits_from_float(x), want = nearest_bf16(x);
      if (got != want) {
        ADD_FAILURE() << fmt::format("f32 0x{:08X}: got 0x{:04X}, nearest is 0x{:04X}", bits_of(x), got, want);
        return;
      }
      ++checked;
    }
  EXPECT_EQ(checked, 0x10000 * 9);
}

// bf16 -> f32 is exact and f32 -> bf16 gives every bf16 back; a NaN comes
// back as 0x7FC0. Checked on the scalar functions and through tensors.
TEST(BFloat16, EveryPatternRoundTrips) {
  std::vector<uint16_t> all(0x10000), want(0x10000);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    all[b] = static_cast<uint16_t>(b);
    want[b] = is_nan_bf16(all[b]) ? 0x7FC0 : all[b];
    const float f = float_from_bf16_bits(all[b]);
    ASSERT_EQ(bits_of(f), b << 16) << "bf16 0x" << std::hex << b;
    ASSERT_EQ(bf16_bits_from_float(f), want[b]) << "bf16 0x" << std::hex << b;
  }
  const Tensor t = bf16_from_bits(all, {256, 256});
  const Tensor f32 = t.to(DType::f32);
  std::span<const float> pf = f32.span<float>();
  for (uint32_t b = 0; b < 0x10000; ++b) ASSERT_EQ(bits_of(pf[b]), b << 16) << "bf16 0x" << std::hex << b;
  EXPECT_EQ(bits_of(f32.to(DType::bf16)), want);
  // f64 holds every bf16 exactly too, and comes back through f32 unchanged.
  EXPECT_EQ(bits_of(t.to(DType::f64).to(DType::bf16)), want);
}

// f64 -> bf16 is PyTorch's: through f32 first, so it can round twice.
TEST(BFloat16, FromDoubleRoundsThroughFloat) {
  // 1 + 2^-8 + 2^-40: to f32 the 2^-40 is below half an ulp (2^-24), giving
  // 1 + 2^-8 = 0x3F808000, a tie that goes to even 0x3F80 (1.0); one rounding
  // from the double would give 0x3F81 (1.0078125).
  const double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  EXPECT_EQ(BFloat16(x).bits, 0x3F80);
  EXPECT_EQ(bits_of(Tensor::from_vector(std::vector<double>{x}, {1}, DType::bf16)), std::vector<uint16_t>{0x3F80});
  EXPECT_EQ(bits_of(Tensor::from_vector(std::vector<double>{x}, {1}, DType::f64).to(DType::bf16)),
            std::vector<uint16_t>{0x3F80});
  // i64 likewise: 259 is 0x43818000 as f32, a tie at odd 0x4381, so 0x4382 (260).
  EXPECT_EQ(bits_of(Tensor::from_vector(std::vector<int64_t>{259}, {1}).to(DType::bf16)),
            std::vector<uint16_t>{0x4382});
  // A double past FLT_MAX is inf already in f32.
  EXPECT_EQ(BFloat16(1e39).bits, 0x7F80);
}

// ---- tensors ------------------------------------------------------------------------

TEST(BFloat16, TensorsConvertBothWays) {
  // Made from doubles: 0.1 -> 0x3DCCCCCD -> 0x3DCD (0.10009765625), pi -> 3.140625.
  const Tensor t = Tensor::from_vector(std::vector<double>{1.0, 0.1, std::numbers::pi, -2.5}, {2, 2}, DType::bf16);
  EXPECT_EQ(bits_of(t), (std::vector<uint16_t>{0x3F80, 0x3DCD, 0x4049, 0xC020}));
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{1.0, 0.10009765625, 3.140625, -2.5}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.0f, 0.10009765625f, 3.140625f, -2.5f}));
  EXPECT_EQ(t.to(DType::f64).to_vector<double>(), t.to_vector<double>());
  EXPECT_EQ(t.to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 3, -2}));  // truncates, as f32 does
  EXPECT_EQ(Tensor::scalar(0.1, DType::bf16).item(), 0.10009765625);

  // A strided f32 source converts in logical order.
  const Tensor src = Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  EXPECT_EQ(src.transpose(0, 1).to(DType::bf16).to_vector<double>(),
            (std::vector<double>{1.0, 4.0, 2.0, 5.0, 3.0, 6.0}));

  // Creation and fills.
  EXPECT_EQ(bits_of(Tensor::zeros({2}, DType::bf16)), (std::vector<uint16_t>{0x0000, 0x0000}));
  EXPECT_EQ(bits_of(Tensor::ones({2}, DType::bf16)), (std::vector<uint16_t>{0x3F80, 0x3F80}));
  EXPECT_EQ(bits_of(Tensor::full({1}, 1e39, DType::bf16)), std::vector<uint16_t>{0x7F80});
  EXPECT_EQ(Tensor::arange(0, 3, 1, DType::bf16).to_vector<double>(), (std::vector<double>{0, 1, 2}));
  Tensor dst = Tensor::zeros({2, 2}, DType::bf16);
  dst.copy_(Tensor::full({2, 2}, 0.1));
  EXPECT_EQ(bits_of(dst), (std::vector<uint16_t>{0x3DCD, 0x3DCD, 0x3DCD, 0x3DCD}));
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_FALSE(is_floating(DType::bf16));
}

// Views, copies, cat and indexing move the bits as they are: a NaN keeps its
// sign and payload (no conversion happens on the way).
TEST(BFloat16, DataMovementKeepsBits) {
  const std::vector<uint16_t> b = {0x7F81, 0xFFC1, 0x0001, 0x8000, 0x3F80, 0xFF80};
  const Tensor t = bf16_from_bits(b, {2, 3});
  EXPECT_EQ(bits_of(t.clone()), b);
  EXPECT_EQ(bits_of(t.transpose(0, 1).contiguous().transpose(0, 1)), b);
  EXPECT_EQ(bits_of(cat({t, t}, 0)), (std::vector<uint16_t>{0x7F81, 0xFFC1, 0x0001, 0x8000, 0x3F80, 0xFF80, 0x7F81,
                                                           0xFFC1, 0x0001, 0x8000, 0x3F80, 0xFF80}));
  EXPECT_EQ(bits_of(index_select(t, 1, Tensor::from_vector(std::vector<int64_t>{2, 0}, {2}))),
            (std::vector<uint16_t>{0x0001, 0x7F81, 0xFF80, 0x8000}));
  Tensor dst = Tensor::empty({2, 3}, DType::bf16);
  dst.copy_(t);
  EXPECT_EQ(bits_of(dst), b);
}

TEST(BFloat16, PrintsTheConvertedValues) {
  const Tensor t = Tensor::from_vector(std::vector<double>{1.0, 0.1, std::numbers::pi}, {3}, DType::bf16);
  EXPECT_EQ(fmt::format("{}", t), "tensor([1.0000, 0.1001, 3.1406], shape=[3], dtype=bf16)");
  const Tensor special = bf16_from_bits({0x7F80, 0xFF80, 0x7FC0, 0x8000}, {2, 2});
  EXPECT_EQ(fmt::format("{}", special), "tensor([[inf, -inf],\n        [nan, -0.0000]], shape=[2, 2], dtype=bf16)");
}

// ---- refusals ------------------------------------------------------------------------

TEST(BFloat16, MathIsRefusedNamingTheOp) {
  const Tensor a = Tensor::ones({2, 2}, DType::bf16);
  const std::string hint = ".to(DType::f32)";
  expect_error<DTypeError>([&] { add(a, a); }, {"add", "bf16", "storage only", hint});
  expect_error<DTypeError>([&] { exp(a); }, {"exp", "bf16", hint});
  expect_error<DTypeError>([&] { sum(a); }, {"sum", "bf16", hint});
  expect_error<DTypeError>([&] { softmax(a, 1); }, {"softmax", "bf16"});
  expect_error<DTypeError>([&] { matmul(a, a); }, {"matmul", "bf16", hint});
  expect_error<DTypeError>([&] { eq(a, a); }, {"eq", "bf16", "storage only"});
  expect_error<DTypeError>([&] { gt(a, a); }, {"gt", "bf16", "storage only"});
  Generator gen(1);
  expect_error<DTypeError>([&] { Tensor::randn({2}, gen, DType::bf16); }, {"randn", "bf16"});
  // Mixing with f32 is the usual dtype mismatch.
  expect_error<DTypeError>([&] { add(a, Tensor::ones({2, 2})); }, {"add", "bf16", "f32"});
  // The same ops run once the operand is converted.
  EXPECT_EQ(sum(a.to(DType::f32)).item(), 4.0);
}

// bf16 cannot require grad: no op computes in it, so no gradient could reach
// a bf16 leaf except through .to(f32). Converting an f32 tensor that
// requires grad to bf16 is not recorded.
TEST(BFloat16, NoGrad) {
  Tensor b = Tensor::zeros({2}, DType::bf16);
  expect_error<DTypeError>([&] { b.requires_grad_(); }, {"requires_grad_", "bf16", "storage only", ".to(DType::f32)"});
  EXPECT_FALSE(b.requires_grad());
  const Tensor w = Tensor::ones({2}).requires_grad_();
  const Tensor wb = w.to(DType::bf16);
  EXPECT_FALSE(wb.requires_grad());
  EXPECT_EQ(wb.grad_fn(), nullptr);
  EXPECT_FALSE(wb.to(DType::f32).requires_grad());
}

// ---- safetensors ----------------------------------------------------------------------

TEST(BFloat16, SafetensorsKeepsTheBits) {
  const std::vector<uint16_t> b = {0x7F81, 0xFFC1, 0x0001, 0x8000, 0x3F80, 0x7F80};
  const TensorMap tensors = {{"w", bf16_from_bits(b, {2, 3})},
                             {"a", Tensor::ones({1})},
                             {"m", Tensor::from_vector(std::vector<bool>{true}, {1})}};
  const std::string bytes = serialize_safetensors(tensors);
  // The reference writer's layout: F32 (rank 11) before BF16 (8) before BOOL (0).
  EXPECT_NE(bytes.find(R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("w":{"dtype":"BF16","shape":[2,3],"data_offsets":[4,16]},)"
                       R"("m":{"dtype":"BOOL","shape":[1],"data_offsets":[16,17]})"),
            std::string::npos)
      << bytes.substr(8, 200);

  TempDir dir("bf16");
  save_safetensors(dir / "w.safetensors", tensors);
  const SafetensorsData back = load_safetensors(dir / "w.safetensors");
  const Tensor& w = back.tensors.at("w");
  EXPECT_EQ(w.dtype(), DType::bf16);
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_EQ(bits_of(w), b);

  // A file written by hand: BF16 is 2 bytes a value, little-endian.
  const std::string header = R"({"x":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  file += header;
  file += std::string("\x80\x3F\x00\xC0", 4);  // 0x3F80 (1.0), 0xC000 (-2.0)
  EXPECT_EQ(parse_safetensors(file).tensors.at("x").to_vector<double>(), (std::vector<double>{1.0, -2.0}));
}

// A bf16 checkpoint loads into an f32 or f64 model: every bf16 value is
// exactly an f32 and an f64 (PyTorch's copy_ widens the same way). Other
// dtype differences stay refused, and the hint names the conversion.
TEST(BFloat16, CheckpointWidensIntoTheModel) {
  Generator gen(0);
  Linear f32(3, 2, gen);
  Linear f64(3, 2, gen, true, DType::f64);
  TensorMap sd = f32.state_dict();
  const std::vector<uint16_t> w = {0x3F80, 0xC000, 0x3EAB, 0x0001, 0x7F7F, 0x8000};  // 1, -2, ~0.334, tiny, max, -0
  sd["weight"] = bf16_from_bits(w, {2, 3});
  sd["bias"] = bf16_from_bits({0x4049, 0xBF00}, {2});
  for (Linear* m : {&f32, &f64}) {
    m->load_state_dict(sd);
    const std::vector<double> got = m->weight.to_vector<double>();
    for (size_t i = 0; i < w.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint64_t>(got[i]), std::bit_cast<uint64_t>(static_cast<double>(float_from_bf16_bits(w[i]))))
          << dtype_name(m->weight.dtype()) << " element " << i;
    EXPECT_EQ(m->bias.to_vector<double>(), (std::vector<double>{3.140625, -0.5}));
  }
  EXPECT_EQ(f32.weight.dtype(), DType::f32);
  EXPECT_EQ(f64.weight.dtype(), DType::f64);

  const TensorMap narrowing = f64.state_dict();  // f64 values into the f32 model would round: the caller's choice
  expect_error<DTypeError>([&] { f32.load_state_dict(narrowing); },
                           {"load_state_dict", "checkpoint has dtype f64, the model has f32", "module.to(f64)"});
}

// ---- PyTorch --------------------------------------------------------------------------

// PyTorch's own conversions on the same inputs, when /usr/bin/python3 has
// torch: f32 -> bf16 over the AgreesWithNearestByValue sweep, f64 -> bf16,
// and bf16 -> f32 for every pattern. Bit for bit, except that a NaN is only
// checked to be a NaN: c10's scalar rule (ours) writes 0x7FC0, but torch's
// vectorised tensor conversion writes 0xFFFF for every NaN (seen with torch
// 1.13 on AVX2).
TEST(BFloat16, MatchesPyTorch) {
  const char* python = "/usr/bin/python3";
  if (::access(python, X_OK) != 0) GTEST_SKIP() << python << " not found";
  TempDir dir("bf16_torch");
  std::vector<uint32_t> f32s;
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) f32s.push_back(hi << 16 | lo);
  std::vector<double> f64s;
  for (int k = -130; k <= 130; k += 7)
    for (double m : {1.0, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40), 1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -40),
                     1.5 + std::ldexp(1.0, -30), -1.0 - std::ldexp(3.0, -8)})
      f64s.push_back(std::ldexp(m, k));
  auto write = [](const std::string& path, const void* p, size_t n) {
    std::ofstream(path, std::ios::binary).write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  };
  write(dir / "f32.bin", f32s.data(), f32s.size() * 4);
  write(dir / "f64.bin", f64s.data(), f64s.size() * 8);
  attograd::testing::write_text(dir / "run.py", R"(
import sys
try:
    import torch
except ImportError:
    sys.exit(77)
d = sys.argv[1]
def load(name, dtype):
    return torch.frombuffer(bytearray(open(d + "/" + name, "rb").read()), dtype=dtype)
open(d + "/f32.out", "wb").write(load("f32.bin", torch.int32).view(torch.float32).to(torch.bfloat16).view(torch.int16).numpy().tobytes())
open(d + "/f64.out", "wb").write(load("f64.bin", torch.float64).to(torch.bfloat16).view(torch.int16).numpy().tobytes())
every = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
open(d + "/bf16.out", "wb").write(every.to(torch.float32).view(torch.int32).numpy().tobytes())
)");
  const int rc = std::system(fmt::format("{} -B {}/run.py {}", python, dir.path, dir.path).c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "torch is not installed for " << python;
  ASSERT_EQ(rc, 0);
  auto read = [](const std::string& path) { return attograd::testing::read_text(path); };

  const std::string f32_out = read(dir / "f32.out");
  ASSERT_EQ(f32_out.size(), f32s.size() * 2);
  int64_t mismatches = 0;
  for (size_t i = 0; i < f32s.size(); ++i) {
    uint16_t torch_bits;
    std::memcpy(&torch_bits, f32_out.data() + 2 * i, 2);
    const uint16_t ours = bf16_bits_from_float(float_of(f32s[i]));
    const bool same = is_nan_bf16(ours) ? is_nan_bf16(torch_bits) : ours == torch_bits;
    if (!same && ++mismatches <= 5)
      ADD_FAILURE() << fmt::format("f32 0x{:08X}: ours 0x{:04X}, torch 0x{:04X}", f32s[i], ours, torch_bits);
  }
  EXPECT_EQ(mismatches, 0);

  const std::string f64_out = read(dir / "f64.out");
  ASSERT_EQ(f64_out.size(), f64s.size() * 2);
  const std::vector<uint16_t> ours64 = bits_of(Tensor::from_vector(f64s, {static_cast<int64_t>(f64s.size())}, DType::f64)
                                                   .to(DType::bf16));
  for (size_t i = 0; i < f64s.size(); ++i) {
    uint16_t torch_bits;
    std::memcpy(&torch_bits, f64_out.data() + 2 * i, 2);
    EXPECT_EQ(ours64[i], torch_bits) << fmt::format("f64 {:a}", f64s[i]);
  }

  const std::string bf16_out = read(dir / "bf16.out");
  ASSERT_EQ(bf16_out.size(), 0x10000u * 4);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    uint32_t torch_bits;
    std::memcpy(&torch_bits, bf16_out.data() + 4 * b, 4);
    ASSERT_EQ(bits_of(float_from_bf16_bits(static_cast<uint16_t>(b))), torch_bits) << "bf16 0x" << std::hex << b;
  }
}
