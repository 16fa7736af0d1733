// attograd/version.h's build features: the linked library reports the options
// its headers were configured with, and each optional library is either there
// and used or missing with the fallback or the error README's Requirements
// promises (SentencePiece: a ValueError naming the package; SLEEF: the scalar
// set only; libxsmm: every product on OpenBLAS). The full build runs the
// first branch of each test; a build with -DATTOGRAD_<LIB>=OFF the second.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/cpu.h>
#include <attograd/autograd/backend/vecmath.h>
#include <attograd/autograd/error.h>
#include <attograd/autograd/tensor.h>
#include <attograd/data/lm_tokenizer.h>
#include <attograd/data/sentencepiece.h>
#include <attograd/version.h>

#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_error;

TEST(BuildFeatures, TheLibraryReportsTheHeadersOptions) {
  const BuildFeatures f = build_features();
  EXPECT_EQ(f.sentencepiece, ATTOGRAD_HAS_SENTENCEPIECE == 1);
  EXPECT_EQ(f.sleef, ATTOGRAD_HAS_SLEEF == 1);
  EXPECT_EQ(f.xsmm, ATTOGRAD_HAS_XSMM == 1);
  EXPECT_EQ(f.mpi, ATTOGRAD_HAS_MPI == 1);
}

TEST(BuildFeatures, SubwordTokenizersWorkOrNameTheMissingLibrary) {
  const std::string model = std::string(ATTOGRAD_SOURCE_DIR) + "/tests/fixtures/sentencepiece/bpe.model";
  const std::string text = "the cat sat on the mat\n";
  if (build_features().sentencepiece) {
    const SentencePieceTokenizer sp = SentencePieceTokenizer::load(model, "bpe");
    EXPECT_EQ(sp.decode(sp.encode(text)), text);
  } else {
    const std::initializer_list<std::string> why = {"built without SentencePiece", "apt install libsentencepiece-dev",
                                                    "ATTOGRAD_SENTENCEPIECE"};
    expect_error<ValueError>([&] { SentencePieceTokenizer::load(model, "bpe"); }, why);
    expect_error<ValueError>([&] { train_lm_tokenizer(text, {.kind = "bpe", .vocab_size = 20}); }, why);
  }
  // The char tokenizer needs nothing.
  const auto chars = train_lm_tokenizer(text, {.kind = "char"});
  EXPECT_EQ(chars->decode(chars->encode(text)), text);
}

TEST(BuildFeatures, SmallGemmsGoToLibxsmmOrAllToOpenBlas) {
  const bool xsmm = build_features().xsmm;
  // Per-head attention products: libxsmm's shape class.
  EXPECT_EQ(routed_gemm_backend(16, 16, 16, false, 1.f, 0.f), xsmm ? GemmBackend::xsmm : GemmBackend::openblas);
  EXPECT_EQ(routed_gemm_backend(1024, 256, 256, false, 1.f, 0.f), xsmm ? GemmBackend::xsmm : GemmBackend::openblas);
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  std::vector<float> out(4);
  const auto forced = [&] {
    const GemmBackendGuard use(GemmBackend::xsmm);
    gemm<float>(out.data(), a.data(), b.data(), 2, 2, 2, false, false, 2, 2, 2, 1.f, 0.f);
  };
  if (xsmm) {
    forced();
    EXPECT_EQ(out, (std::vector<float>{19, 22, 43, 50}));
  } else {
    expect_error<ValueError>(forced, {"without libxsmm", "ATTOGRAD_XSMM=OFF", "libxsmm-dev"});
  }
  // The default route computes the product either way.
  gemm<float>(out.data(), a.data(), b.data(), 2, 2, 2, false, false, 2, 2, 2, 1.f, 0.f);
  EXPECT_EQ(out, (std::vector<float>{19, 22, 43, 50}));
}

TEST(BuildFeatures, VectorMathRunsSleefSetsOrTheScalarOne) {
  if (build_features().sleef) {
#if defined(__x86_64__)
    const CpuFeatures cpu = cpu_features();
    EXPECT_EQ(vecmath_for(VecIsa::avx2) != nullptr, cpu.avx2 && cpu.fma);
    EXPECT_EQ(vecmath_for(VecIsa::avx512) != nullptr, cpu.avx512 && cpu.fma);
#endif
  } else {
    EXPECT_EQ(vecmath_for(VecIsa::avx2), nullptr);
    EXPECT_EQ(vecmath_for(VecIsa::avx512), nullptr);
    EXPECT_EQ(vecmath().isa, VecIsa::scalar);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(vecmath_named("avx512").isa, VecIsa::scalar);
    const std::string warning = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(warning.find("needs SLEEF, which this build has not"), std::string::npos) << warning;
  }
  // Either set computes e^x (test_vecmath.cpp checks the 1.0 ulp bound).
  const float x[3] = {0.f, 1.f, -1.f};
  float y[3];
  vecmath().exp(y, x, 3);
  EXPECT_EQ(y[0], 1.f);
  EXPECT_NEAR(y[1], 2.7182817f, 3e-7f);
  EXPECT_NEAR(y[2], 0.36787945f, 3e-8f);
}
