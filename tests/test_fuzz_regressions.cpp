// Replays the fuzz seeds (fuzz/corpus/<target>/) and every input that once
// broke a loader or a program (fuzz/regressions/<target>/) through the fuzz
// targets of fuzz/targets.h and fuzz/model_target.h, in every normal build:
// bad input gives a typed attograd::Error (swallowed by the target), anything
// else fails here. fuzz/craft.py writes the model target's files (issue 29's
// probe: B1 configs whose sizes wrap, B2 a shape larger than its bytes, B5 a
// config of 10^8 layers).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

#include <fmt/format.h>

#include <attograd/autograd/io/safetensors.h>
#include "fuzz/model_target.h"
#include "fuzz/targets.h"

namespace fs = std::filesystem;

namespace attograd {
namespace {

// Runs `target` on every file under fuzz/<kind>/<name>/; returns how many.
int replay(const std::string& kind, const std::string& name, const std::function<void(std::string_view)>& target) {
  const fs::path dir = fs::path(ATTOGRAD_SOURCE_DIR) / "fuzz" / kind / name;
  int n = 0;
  if (!fs::is_directory(dir)) return n;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() == "README.md") continue;
    SCOPED_TRACE(e.path().string());
    const std::string bytes = read_file_bytes(e.path().string());
    EXPECT_NO_THROW(target(bytes));
    ++n;
  }
  return n;
}

struct Target {
  const char* name;
  void (*run)(std::string_view);
};
constexpr Target kTargets[] = {
    {"safetensors", fuzz::safetensors}, {"vocab", fuzz::vocab},           {"tsv", fuzz::tsv},
    {"checkpoint", fuzz::checkpoint},   {"model", fuzz::model},           {"pairs", fuzz::pairs}};

TEST(FuzzRegressions, SeedCorporaPass) {
  for (const Target& t : kTargets) {
    SCOPED_TRACE(t.name);
    EXPECT_GE(replay("corpus", t.name, t.run), 3) << "fuzz/corpus/" << t.name << " should hold a few seeds";
  }
}

TEST(FuzzRegressions, InputsThatOnceFailedPass) {
  int total = 0;
  for (const Target& t : kTargets) total += replay("regressions", t.name, t.run);
  RecordProperty("inputs", total);
}

// The model target is not vacuous: its seeds of each family build and run.
TEST(FuzzRegressions, ModelSeedsOfEachFamilyBuildAndRun) {
  const auto seed = [](const std::string& name) {
    return fuzz::model_checkpoint(
        read_file_bytes((fs::path(ATTOGRAD_SOURCE_DIR) / "fuzz/corpus/model" / (name + ".model.safetensors")).string()));
  };
  EXPECT_TRUE(fuzz::use_gpt(seed("lm")));
  for (const char* name : {"copy", "translate", "translate-gqa"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(fuzz::use_seq2seq(seed(name)));
  }
  EXPECT_THROW(fuzz::use_gpt(seed("copy")), ValueError);  // a copy_task checkpoint holds no GPT
}

// Seconds to parse a safetensors file of n tensors of shape [0] (refused or not).
double seconds_to_parse(int n) {
  TensorMap many;
  for (int i = 0; i < n; ++i) many.emplace(fmt::format("zz{}", i), Tensor::zeros({0}));
  const std::string bytes = serialize_safetensors(many);
  const auto start = std::chrono::steady_clock::now();
  try {
    EXPECT_EQ(parse_safetensors(bytes, "many entries").tensors.size(), many.size());
  } catch (const IOError&) {
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// B9: the header parser was quadratic in the number of tensors (40,000
// entries took 11.8 s, 200,000 over a minute). The headers are made here
// rather than committed (3 MB). Ten times the entries must cost about ten
// times the time, not a hundred: the bound is loose (30 times, plus half a
// second for a busy machine), for a quadratic bug, not a benchmark.
TEST(FuzzRegressions, HeaderOf40000EntriesIsReadInLinearTime) {
  const double t4k = seconds_to_parse(4000), t40k = seconds_to_parse(40000);
  EXPECT_LT(t40k, 30 * t4k + 0.5) << "4,000 header entries took " << t4k << " s, 40,000 took " << t40k << " s";
}

}  // namespace
}  // namespace attograd
