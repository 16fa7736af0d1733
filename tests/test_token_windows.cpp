// The language model's windows over a token stream (attograd/data/token_windows.h).
#include <gtest/gtest.h>

#include <attograd/autograd/error.h>
#include <attograd/data/token_windows.h>

#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

std::vector<int32_t> counting(int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

}  // namespace

TEST(TokenWindows, RandomWindowsAreShiftedPairsInsideTheTrainingHead) {
  TokenWindows w(counting(100), 4, 0.2);
  EXPECT_EQ(w.train_tokens(), 80);
  EXPECT_EQ(w.heldout_tokens(), 20);
  Generator gen(1);
  for (int k = 0; k < 50; ++k) {
    const LMBatch b = w.sample(8, gen);
    ASSERT_EQ(b.input.shape(), (Shape{8, 4}));
    const auto in = b.input.to_vector<int64_t>(), out = b.target.to_vector<int64_t>();
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t t = 0; t < 4; ++t) {
        EXPECT_EQ(in[r * 4 + t], in[r * 4] + t);
        EXPECT_EQ(out[r * 4 + t], in[r * 4 + t] + 1);
        EXPECT_LT(out[r * 4 + t], 80);  // the last target is still in the head
      }
  }
  Generator a(7), b(7);
  EXPECT_EQ(vals(w.sample(4, a).input), vals(w.sample(4, b).input));
}

TEST(TokenWindows, HeldOutTailIsCutIntoConsecutiveWindows) {
  TokenWindows w(counting(100), 4, 0.2);
  EXPECT_EQ(w.heldout_windows(), 4);  // (20 − 1) / 4
  const LMBatch b = w.heldout_batch(1, 3);
  EXPECT_EQ(b.input.to_vector<int64_t>()[0], 84);
  EXPECT_EQ(b.target.to_vector<int64_t>()[11], 96);
  expect_error<IndexError>([&] { w.heldout_batch(2, 3); }, {"outside [0, 4)"});
}

TEST(TokenWindows, TooLittleTextForTheContextIsAClearError) {
  expect_error<ValueError>([] { TokenWindows(counting(30), 8, 0.1); },
                           {"30 tokens", "3 held out", "context + 1 = 9", "at most 2"});
  expect_error<ValueError>([] { TokenWindows(counting(30), 2, 1.0); }, {"(0, 1)"});
}

