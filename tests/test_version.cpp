// attograd/version.h and the umbrella header, included the way a user of the
// installed library includes them (<attograd/...>, resolved in the build tree).
#include <attograd/attograd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

TEST(Version, TheLibraryReportsTheHeadersVersion) {
  EXPECT_STREQ(attograd::version(), ATTOGRAD_VERSION_STRING);
  EXPECT_EQ(fmt::format("{}.{}.{}", ATTOGRAD_VERSION_MAJOR, ATTOGRAD_VERSION_MINOR, ATTOGRAD_VERSION_PATCH),
            ATTOGRAD_VERSION_STRING);
}

TEST(Version, TheNumberOrdersReleases) {
  static_assert(ATTOGRAD_VERSION ==
                ATTOGRAD_VERSION_MAJOR * 10000 + ATTOGRAD_VERSION_MINOR * 100 + ATTOGRAD_VERSION_PATCH);
  static_assert(ATTOGRAD_VERSION_MINOR < 100 && ATTOGRAD_VERSION_PATCH < 100);
  EXPECT_GE(ATTOGRAD_VERSION, 100);  // 0.1.0, the first release with a version header
}

TEST(Version, TheUmbrellaHeaderGivesTheWholeApi) {
  attograd::Generator gen(0);
  auto x = attograd::Tensor::randn({2, 3}, gen, attograd::DType::f64).requires_grad_();
  attograd::Linear layer(3, 1, gen, true, attograd::DType::f64);
  attograd::optim::Adam opt(layer.parameters());
  attograd::sum(layer.forward(x)).backward();
  opt.step();
  EXPECT_TRUE(x.grad().defined());
}
