// Loading OpenBLAS and choosing its kernel (attograd/autograd/backend/blas_kernel.h):
// the decision and the warning as pure functions, CPUID against the kernel's
// view of the CPU, this test program run again as a child in chosen
// environments (no call of anything before its first GEMM, as in every
// program), and GEMM under the chosen kernel against the naive reference at
// the model's shapes.
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/blas_kernel.h>
#include <attograd/autograd/generator.h>
#include <attograd/autograd/tensor.h>

#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

CpuFeatures features(bool avx2, bool avx512, bool bf16) {
  CpuFeatures f;
  f.avx2 = f.fma = avx2;
  f.avx512 = avx512;
  f.avx512_bf16 = bf16;
  return f;
}

std::set<std::string> proc_cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> flags;
      for (std::string w; words >> w;) flags.insert(w);
      return flags;
    }
  return {};
}

bool same_core(const std::string& a, const std::string& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

// The threads of this process: the entries of /proc/self/task.
int process_threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// What BlasKernel.ChildReport printed in a child run: "<key>=<value>" lines.
struct ChildRun {
  std::string kernel, environment, num_threads_environment;
  int threads_before = 0, threads_after = 0;  // the process' threads before and after the first GEMM
  int warnings = 0;
  std::string err;
};

// This test program again, with `env_args` given to env(1) (OPENBLAS_CORETYPE
// and OPENBLAS_NUM_THREADS are always unset first: the environment here may
// set them), running only BlasKernel.ChildReport.
ChildRun run_child(const std::vector<std::string>& env_args) {
  TempDir tmp("blas_kernel_child");
  std::vector<std::string> args = {"-u", "OPENBLAS_CORETYPE", "-u", "OPENBLAS_NUM_THREADS", "ATTOGRAD_TEST_CHILD=1",
                                   "ASAN_OPTIONS=verify_asan_link_order=0"};  // LD_PRELOAD under ASan
  args.insert(args.end(), env_args.begin(), env_args.end());
  args.push_back(std::filesystem::read_symlink("/proc/self/exe").string());
  args.push_back("--gtest_filter=BlasKernel.ChildReport");
  const ProgramOutcome r = run_program("env", args, tmp.path);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  ChildRun run;
  for (const std::string& line : lines_of(r.out)) {
    if (line.rfind("kernel=", 0) == 0) run.kernel = line.substr(7);
    if (line.rfind("environment=", 0) == 0) run.environment = line.substr(12);
    if (line.rfind("num_threads_environment=", 0) == 0) run.num_threads_environment = line.substr(24);
    if (line.rfind("threads_before=", 0) == 0) run.threads_before = std::stoi(line.substr(15));
    if (line.rfind("threads_after=", 0) == 0) run.threads_after = std::stoi(line.substr(14));
  }
  for (const std::string& line : lines_of(r.err)) run.warnings += line.rfind("attograd: warning: ", 0) == 0;
  run.err = r.err;
  return run;
}

}  // namespace

TEST(BlasKernel, BestCoreFollowsTheFeatures) {
  EXPECT_EQ(best_openblas_core(features(true, true, true)), "SkylakeX");  // Cooperlake: same sgemm, unknown name
  EXPECT_EQ(best_openblas_core(features(true, true, false)), "SkylakeX");
  EXPECT_EQ(best_openblas_core(features(true, false, false)), "Haswell");
  EXPECT_EQ(best_openblas_core(features(false, false, false)), "");
}

TEST(BlasKernel, GenericCores) {
  for (const char* g : {"Prescott", "prescott", "Core2", "Nehalem", ""}) EXPECT_TRUE(is_generic_openblas_core(g)) << g;
  for (const char* f : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
    EXPECT_FALSE(is_generic_openblas_core(f)) << f;
}

TEST(BlasKernel, RequestsTheBestCoreUnlessTheUserChoseOrItIsTooLate) {
  const CpuFeatures zen5 = features(true, true, true);
  EXPECT_EQ(openblas_core_to_request(zen5, std::nullopt, false), "SkylakeX");
  EXPECT_EQ(openblas_core_to_request(features(true, false, false), std::nullopt, false), "Haswell");
  // The user's choice stands, even a slow one, even an empty one.
  EXPECT_EQ(openblas_core_to_request(zen5, std::string("Prescott"), false), std::nullopt);
  EXPECT_EQ(openblas_core_to_request(zen5, std::string(""), false), std::nullopt);
  // OpenBLAS already loaded (its constructor has run), or an old CPU: nothing to ask.
  EXPECT_EQ(openblas_core_to_request(zen5, std::nullopt, true), std::nullopt);
  EXPECT_EQ(openblas_core_to_request(features(false, false, false), std::nullopt, false), std::nullopt);
}

TEST(BlasKernel, WarnsOfAGenericKernelSayingWhy) {
  const CpuFeatures zen5 = features(true, true, true);
  const auto warning = [&](OpenBlasLoad load) { return slow_kernel_warning(load, zen5).value_or(""); };
  // A fast kernel, or a CPU with nothing better: silence.
  EXPECT_EQ(slow_kernel_warning({.corename = "Cooperlake"}, zen5), std::nullopt);
  EXPECT_EQ(slow_kernel_warning({.corename = "Haswell", .user_setting = "Haswell"}, zen5), std::nullopt);
  EXPECT_EQ(slow_kernel_warning({.corename = "Prescott"}, features(false, false, false)), std::nullopt);
  // Each cause of a generic kernel names itself and the core to ask for.
  const std::string user = warning({.corename = "Prescott", .user_setting = "Prescott"});
  for (const char* part : {"generic 'Prescott'", "supports 'SkylakeX'", "OPENBLAS_CORETYPE=Prescott is set",
                           "OPENBLAS_CORETYPE=SkylakeX"})
    EXPECT_TRUE(contains(user, part)) << user;
  const std::string before = warning({.corename = "Prescott", .loaded_before = true});
  for (const char* part : {"loaded before attograd", "OPENBLAS_CORETYPE=SkylakeX"})
    EXPECT_TRUE(contains(before, part)) << before;
  const std::string fixed = warning({.corename = "Core2", .dynamic_arch = false});
  for (const char* part : {"generic 'Core2'", "not a DYNAMIC_ARCH build"})
    EXPECT_TRUE(contains(fixed, part)) << fixed;
  const std::string ignored = warning({.corename = "Prescott"});
  EXPECT_TRUE(contains(ignored, "OPENBLAS_CORETYPE=SkylakeX was requested but did not take effect"))
      << ignored;
}

TEST(BlasKernel, CpuidAgreesWithTheKernel) {
  const std::set<std::string> flags = proc_cpu_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  const CpuFeatures f = cpu_features();
  EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(f.fma, flags.count("fma") == 1);
  const bool avx512 = flags.count("avx512f") && flags.count("avx512bw") && flags.count("avx512dq") &&
                      flags.count("avx512vl");
  EXPECT_EQ(f.avx512, avx512);
  EXPECT_EQ(f.avx512_bf16, avx512 && flags.count("avx512_bf16") == 1);
}

// The child's half of the tests below: two GEMMs with nothing called before
// them, then the kernel and the environment as the library left it. On its
// own it checks that the GEMM is right and OpenBLAS is loaded.
TEST(BlasKernel, ChildReport) {
  const std::vector<double> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 0, 1, 1, 1};  // [2, 3] @ [3, 2]
  std::vector<double> out(4);
  // A host that loaded OpenBLAS with its own kernel choice, then dropped the variable.
  if (std::getenv("ATTOGRAD_TEST_CHILD_DROP_CORETYPE")) unsetenv("OPENBLAS_CORETYPE");
  const int threads_before = process_threads();
  for (int i = 0; i < 2; ++i) gemm<double>(out.data(), a.data(), b.data(), 2, 2, 3, false, false, 3, 2, 2, 1.0, 0.0);
  EXPECT_EQ(out, (std::vector<double>{4, 5, 10, 11}));
  EXPECT_FALSE(blas_corename().empty());
  if (!std::getenv("ATTOGRAD_TEST_CHILD")) return;
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const char* threads_env = std::getenv("OPENBLAS_NUM_THREADS");
  std::printf("kernel=%s\nenvironment=%s\nnum_threads_environment=%s\nthreads_before=%d\nthreads_after=%d\n",
              blas_corename().c_str(), env ? env : "(unset)", threads_env ? threads_env : "(unset)", threads_before,
              process_threads());
}

// Loading OpenBLAS starts no worker threads (attograd runs it at one thread,
// and a worker per core would spin beside the pool's threads before it
// sleeps), whatever OPENBLAS_NUM_THREADS says; the variable is left as the
// user set it, or unset.
TEST(BlasKernel, TheLoadStartsNoOpenBlasThreads) {
  for (const std::vector<std::string>& env : {std::vector<std::string>{}, {"OPENBLAS_NUM_THREADS=4"}}) {
    const ChildRun run = run_child(env);
    EXPECT_EQ(run.threads_after, run.threads_before) << (env.empty() ? "unset" : env[0]) << "\n" << run.err;
    EXPECT_EQ(run.num_threads_environment, env.empty() ? "(unset)" : "4");
  }
}

// With OPENBLAS_CORETYPE unset, a program that calls nothing first runs the
// core the library asked for, the best the CPU supports (not a generic one),
// and its environment is left as it was; nothing is printed. (On a CPU with
// AVX512-BF16 OpenBLAS 0.3.21 on its own would say Cooperlake, so there the
// kernel's name shows that the request took effect.)
TEST(BlasKernel, AProgramGetsTheBestKernelWithNoCall) {
  const std::string best = best_openblas_core(cpu_features());
  if (best.empty()) GTEST_SKIP() << "CPU has no AVX2";
  const ChildRun run = run_child({});
  EXPECT_TRUE(same_core(run.kernel, best)) << run.kernel << " vs " << best;
  EXPECT_FALSE(is_generic_openblas_core(run.kernel)) << run.kernel;
  EXPECT_EQ(run.environment, "(unset)");
  EXPECT_EQ(run.warnings, 0) << run.err;
}

// The user's OPENBLAS_CORETYPE stands: a fast one silently, a generic one with
// one warning that names it (never silently slow).
TEST(BlasKernel, TheUsersCoreStands) {
  const std::string best = best_openblas_core(cpu_features());
  if (best.empty()) GTEST_SKIP() << "CPU has no AVX2";
  const ChildRun haswell = run_child({"OPENBLAS_CORETYPE=Haswell"});
  EXPECT_TRUE(same_core(haswell.kernel, "Haswell")) << haswell.kernel;
  EXPECT_EQ(haswell.environment, "Haswell");
  EXPECT_EQ(haswell.warnings, 0) << haswell.err;
  const ChildRun prescott = run_child({"OPENBLAS_CORETYPE=Prescott"});
  EXPECT_TRUE(same_core(prescott.kernel, "Prescott")) << prescott.kernel;
  EXPECT_EQ(prescott.warnings, 1) << prescott.err;
  EXPECT_TRUE(contains(prescott.err, "OPENBLAS_CORETYPE=Prescott is set")) << prescott.err;
}

// OpenBLAS loaded into the process before the first GEMM (here by LD_PRELOAD,
// with a generic kernel the child's environment no longer names): it is used
// as it is, with one warning saying why, and nothing is requested.
TEST(BlasKernel, WarnsWhenOpenBlasWasLoadedBefore) {
  const std::string best = best_openblas_core(cpu_features());
  if (best.empty()) GTEST_SKIP() << "CPU has no AVX2";
  const ChildRun run = run_child({"LD_PRELOAD=libopenblas.so.0", "OPENBLAS_CORETYPE=Prescott",
                                  "ATTOGRAD_TEST_CHILD_DROP_CORETYPE=1"});
  EXPECT_TRUE(same_core(run.kernel, "Prescott")) << run.kernel;
  EXPECT_EQ(run.environment, "(unset)");
  EXPECT_EQ(run.warnings, 1) << run.err;
  EXPECT_TRUE(contains(run.err, "loaded before attograd")) << run.err;
}

// attograd loads OpenBLAS locally: its BLAS names are not the process'.
TEST(BlasKernel, OpenBlasStaysOutOfTheGlobalScope) {
  EXPECT_FALSE(blas_corename().empty());
  EXPECT_TRUE(contains(openblas_library_path(), "openblas")) << openblas_library_path();
  for (const char* name : {"cblas_sgemm", "cblas_dgemm", "openblas_get_corename"})
    EXPECT_EQ(dlsym(RTLD_DEFAULT, name), nullptr) << name;
}

// GEMM through the chosen kernel matches the naive kernel: rows B·T = 1024
// of the base model, a K past the kernels' K blocking, odd sizes that leave
// edge tiles, attention-score shapes; every transpose pairing, 1 and 2 threads.
TEST(BlasKernel, GemmMatchesNaiveAtModelShapes) {
  struct Case { int64_t M, N, K; };
  const Case cases[] = {{1024, 64, 256}, {64, 96, 640}, {33, 65, 17}, {256, 256, 32}};
  Generator gen(11);
  const int threads_before = blas_num_threads();
  for (int threads : {1, 2}) {
    blas_set_num_threads(threads);
    for (const Case& c : cases)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          SCOPED_TRACE(fmt::format("{} threads, M={} N={} K={} ta={} tb={} kernel {}", threads, c.M, c.N, c.K, ta, tb,
                                   blas_corename()));
          const std::vector<float> a = Tensor::randn({c.M * c.K}, gen).to_vector<float>();
          const std::vector<float> b = Tensor::randn({c.K * c.N}, gen).to_vector<float>();
          std::vector<float> fast = Tensor::randn({c.M * c.N}, gen).to_vector<float>(), ref = fast;
          const int64_t lda = ta ? c.M : c.K, ldb = tb ? c.K : c.N;
          gemm<float>(fast.data(), a.data(), b.data(), c.M, c.N, c.K, ta, tb, lda, ldb, c.N, 1.f, 0.5f);
          gemm_naive<float>(ref.data(), a.data(), b.data(), c.M, c.N, c.K, ta, tb, lda, ldb, c.N, 1.f, 0.5f);
          // float sums of K products of unit normals: error grows like √K·ε.
          const double tol = 1e-5 * std::sqrt(static_cast<double>(c.K)) * 4;
          double worst = 0;
          for (size_t i = 0; i < fast.size(); ++i) worst = std::max(worst, std::abs(double(fast[i]) - ref[i]));
          EXPECT_LT(worst, tol);
        }
  }
  blas_set_num_threads(threads_before);
}
