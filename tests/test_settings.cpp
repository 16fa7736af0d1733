// The switches of attograd/autograd/settings.h: every guard puts back what it
// found (nested, and when an exception unwinds through it); a thread's
// settings stay on that thread while the process' reach every thread; the
// environment variables set the defaults, and a bad value is an error naming
// the variable, the value and the accepted ones. ctest runs
// Settings.TheEnvironmentSetsTheDefaults again with ATTOGRAD_GEMM set to each
// backend (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <attograd/autograd/autograd.h>
#include <attograd/autograd/backend/vecmath.h>
#include <attograd/autograd/settings.h>

#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

// An observer that only counts what it sees.
struct CountingObserver : BackwardObserver {
  int nodes = 0;
  void before(const Node&, const Tensor&) override { ++nodes; }
  void after(const Node&, const Tensor&, const std::vector<Tensor>&) override {}
};

// Scoped<Setting> over two values a and b, both other than the value in
// force: nested guards restore in turn, and an exception thrown inside both
// leaves the value found before.
template <class Setting>
void expect_scoped_restores(const typename Setting::value_type& a, const typename Setting::value_type& b) {
  const typename Setting::value_type before = Setting::get();
  ASSERT_FALSE(a == before);
  ASSERT_FALSE(b == a);
  {
    Scoped<Setting> outer(a);
    EXPECT_TRUE(Setting::get() == a);
    {
      Scoped<Setting> inner(b);
      EXPECT_TRUE(Setting::get() == b);
    }
    EXPECT_TRUE(Setting::get() == a);
  }
  EXPECT_TRUE(Setting::get() == before);
  try {
    Scoped<Setting> outer(a);
    Scoped<Setting> inner(b);
    throw std::runtime_error("unwind");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(Setting::get() == before);
}

// The variable's value, or nothing when it is unset or empty (the settings
// read an empty one as unset).
std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::optional<std::string>(v) : std::nullopt;
}

// The set vecmath() picks with ATTOGRAD_VECMATH unset: the widest this CPU runs.
const VecMath& widest_vecmath() {
  for (VecIsa isa : {VecIsa::avx512, VecIsa::avx2})
    if (const VecMath* m = vecmath_for(isa)) return *m;
  return *vecmath_for(VecIsa::scalar);
}

// This test program again with `env_args` for env(1) (the three variables
// unset first), running only Settings.TheEnvironmentSetsTheDefaults: the
// error it printed ("error=" line), or "" when there was none.
std::string child_error(const std::vector<std::string>& env_args) {
  TempDir tmp("settings_child");
  std::vector<std::string> args = {"-u", "ATTOGRAD_GEMM", "-u", "ATTOGRAD_MEMORY", "-u", "ATTOGRAD_VECMATH",
                                   "ATTOGRAD_TEST_CHILD=1",
                                   "ASAN_OPTIONS=verify_asan_link_order=0"};  // LD_PRELOAD under ASan
  args.insert(args.end(), env_args.begin(), env_args.end());
  args.push_back(std::filesystem::read_symlink("/proc/self/exe").string());
  args.push_back("--gtest_filter=Settings.TheEnvironmentSetsTheDefaults");
  const ProgramOutcome r = run_program("env", args, tmp.path);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  for (const std::string& line : lines_of(r.out))
    if (line.rfind("error=", 0) == 0) return line.substr(6);
  return "";
}

}  // namespace

TEST(Settings, EveryGuardRestoresNestedAndOnUnwinding) {
  const bool grad = GradMode::enabled(), anomaly = AnomalyMode::enabled();
  expect_scoped_restores<GradMode>(!grad, grad);
  expect_scoped_restores<AnomalyMode>(!anomaly, anomaly);
  CountingObserver one, two;
  expect_scoped_restores<BackwardObserverSetting>(&one, &two);
  const MemoryOptions fast = parse_memory_options("fast"), lean = parse_memory_options("lean");
  const bool is_fast = memory_options() == fast;
  expect_scoped_restores<MemoryOptionsSetting>(is_fast ? lean : fast, parse_memory_options("attention=probabilities"));
  // openblas and naive: every build has them (libxsmm is optional).
  const GemmBackend gemm_a = gemm_backend() == GemmBackend::naive ? GemmBackend::openblas : GemmBackend::naive;
  expect_scoped_restores<GemmBackendSetting>(
      gemm_a, gemm_a == GemmBackend::naive ? GemmBackend::openblas : GemmBackend::naive);
  const int threads = num_threads();
  expect_scoped_restores<NumThreadsSetting>(threads + 1, threads + 2);
}

// The guards a program writes are the same Scoped guards: each sets its
// value, and they nest with one another.
TEST(Settings, NamedGuardsSetTheirValueAndNest) {
  ASSERT_TRUE(GradMode::enabled());
  ASSERT_FALSE(AnomalyMode::enabled());
  try {
    NoGradGuard no_grad;
    EXPECT_FALSE(GradMode::enabled());
    {
      GradModeGuard on(true);
      EXPECT_TRUE(GradMode::enabled());
      NoGradGuard again;
      EXPECT_FALSE(GradMode::enabled());
      AnomalyGuard anomaly;
      EXPECT_TRUE(AnomalyMode::enabled());
      throw std::runtime_error("unwind");
    }
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(GradMode::enabled());
  EXPECT_FALSE(AnomalyMode::enabled());

  // What the grad mode is for: no node under NoGradGuard, one again after it.
  const Tensor x = Tensor::ones({2}).requires_grad_();
  {
    NoGradGuard no_grad;
    EXPECT_EQ((x * 2.0).grad_fn(), nullptr);
  }
  EXPECT_NE((x * 2.0).grad_fn(), nullptr);

  // The observer a guard installs is the one backward shows its nodes to.
  CountingObserver watch;
  {
    BackwardObserverGuard installed(&watch);
    sum(x * 2.0).backward();
  }
  EXPECT_GT(watch.nodes, 0);
  const int seen = watch.nodes;
  sum(x * 2.0).backward();
  EXPECT_EQ(watch.nodes, seen);
}

TEST(Settings, ThreadSettingsStayOnTheirThread) {
  CountingObserver watch;
  NoGradGuard no_grad;
  AnomalyGuard anomaly;
  BackwardObserverGuard installed(&watch);
  const Tensor x = Tensor::ones({2}).requires_grad_();
  bool grad = false, checks = true, records = false;
  BackwardObserver* observer = &watch;
  std::thread([&] {
    grad = GradMode::enabled();
    checks = AnomalyMode::enabled();
    observer = backward_observer();
    records = (x * 2.0).grad_fn() != nullptr;
    // Left set when the thread ends: it must not reach the main thread.
    GradMode::set_enabled(true);
    AnomalyMode::set_enabled(false);
  }).join();
  EXPECT_TRUE(grad);
  EXPECT_FALSE(checks);
  EXPECT_EQ(observer, nullptr);
  EXPECT_TRUE(records);
  EXPECT_FALSE(GradMode::enabled());
  EXPECT_TRUE(AnomalyMode::enabled());
  EXPECT_EQ(backward_observer(), &watch);
  EXPECT_EQ((x * 2.0).grad_fn(), nullptr);
}

TEST(Settings, ProcessSettingsReachEveryThread) {
  const MemoryOptions fast = parse_memory_options("fast");
  const GemmBackend other = gemm_backend() == GemmBackend::naive ? GemmBackend::openblas : GemmBackend::naive;
  MemoryOptionsGuard memory(memory_options() == fast ? parse_memory_options("lean") : fast);
  GemmBackendGuard gemm(other);
  MemoryOptions seen_memory;
  GemmBackend seen_gemm = GemmBackend::blas;
  std::thread([&] {
    seen_memory = memory_options();
    seen_gemm = gemm_backend();
  }).join();
  EXPECT_EQ(seen_memory, memory_options());
  EXPECT_EQ(seen_gemm, other);
}

TEST(Settings, NamesReadBack) {
  for (GemmBackend b : {GemmBackend::blas, GemmBackend::openblas, GemmBackend::xsmm, GemmBackend::naive})
    EXPECT_EQ(parse_gemm_backend(gemm_backend_name(b)), b);
  expect_error<ValueError>([] { parse_gemm_backend("mkl"); }, {"gemm", "'mkl'", "ATTOGRAD_GEMM", "openblas"});
  expect_error<ValueError>([] { parse_gemm_backend("blis"); }, {"gemm", "'blis'"});  // dropped (issue 30)

  const MemoryOptions fast = parse_memory_options("fast"), lean = parse_memory_options("lean");
  EXPECT_EQ(lean, MemoryOptions{});
  EXPECT_EQ(fast, (MemoryOptions{AttentionSaves::probabilities, LayerNormSaves::input}));
  EXPECT_EQ(parse_memory_options(""), MemoryOptions{});
  EXPECT_EQ(parse_memory_options("attention=probabilities"),
            (MemoryOptions{AttentionSaves::probabilities, LayerNormSaves::output}));
  EXPECT_EQ(parse_memory_options("layer_norm=input,attention=row_stats"),
            (MemoryOptions{AttentionSaves::row_stats, LayerNormSaves::input}));
  for (const MemoryOptions& o : {lean, fast, parse_memory_options("attention=probabilities")})
    EXPECT_EQ(parse_memory_options(memory_options_str(o)), o) << memory_options_str(o);
  EXPECT_EQ(memory_options_str(lean), "attention=row_stats,layer_norm=output");
  expect_error<ValueError>([] { parse_memory_options("attention=p"); },
                           {"ATTOGRAD_MEMORY", "attention", "'p'", "probabilities"});
  expect_error<ValueError>([] { parse_memory_options("lean,"); }, {"ATTOGRAD_MEMORY", "cannot read"});
  expect_error<ValueError>([] { parse_memory_options("small"); }, {"ATTOGRAD_MEMORY", "'small'", "lean, fast"});
}

// Each variable sets its setting's default (empty: unset). A child run with
// ATTOGRAD_TEST_CHILD set prints the error a bad value gives instead.
TEST(Settings, TheEnvironmentSetsTheDefaults) {
  try {
    read_settings_from_environment();
  } catch (const ValueError& e) {
    if (!std::getenv("ATTOGRAD_TEST_CHILD")) throw;
    std::printf("error=%s\n", e.what());
    return;
  }
  const auto gemm = env("ATTOGRAD_GEMM"), memory = env("ATTOGRAD_MEMORY"), vec = env("ATTOGRAD_VECMATH");
  EXPECT_EQ(gemm_backend(), gemm ? parse_gemm_backend(*gemm) : GemmBackend::blas);
  EXPECT_EQ(memory_options(), memory ? parse_memory_options(*memory) : MemoryOptions{});
  EXPECT_EQ(vecmath().name, vec ? vecmath_named(*vec).name : widest_vecmath().name);
}

TEST(Settings, ABadVariableIsAnErrorNamingItTheValueAndTheChoices) {
  const struct {
    std::string assignment;
    std::vector<std::string> phrases;
  } cases[] = {
      {"ATTOGRAD_GEMM=mkl", {"ATTOGRAD_GEMM", "'mkl'", "blas, openblas, xsmm, naive"}},
      {"ATTOGRAD_MEMORY=small", {"ATTOGRAD_MEMORY", "'small'", "lean, fast"}},
      {"ATTOGRAD_MEMORY=attention=p", {"ATTOGRAD_MEMORY", "'p'", "probabilities", "row_stats"}},
      {"ATTOGRAD_VECMATH=avx1024", {"ATTOGRAD_VECMATH", "'avx1024'", "scalar, avx2, avx512"}},
  };
  for (const auto& c : cases) {
    const std::string error = child_error({c.assignment});
    for (const std::string& phrase : c.phrases)
      EXPECT_NE(error.find(phrase), std::string::npos) << c.assignment << ": '" << phrase << "' not in: " << error;
  }
  // Set, but empty: the defaults, no error (the child checks them).
  EXPECT_EQ(child_error({"ATTOGRAD_GEMM=", "ATTOGRAD_MEMORY=", "ATTOGRAD_VECMATH="}), "");
  EXPECT_EQ(child_error({"ATTOGRAD_GEMM=naive", "ATTOGRAD_MEMORY=fast", "ATTOGRAD_VECMATH=scalar"}), "");
}
