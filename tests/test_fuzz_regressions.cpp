// Replays the fuzz seeds (fuzz/corpus/<target>/) and every input that once
// broke a loader (fuzz/regressions/<target>/) through the fuzz targets of
// fuzz/targets.h, in every normal build: bad input gives a typed
// attograd::Error (swallowed by the target), anything else fails here.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include <attograd/autograd/io/safetensors.h>
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
    {"safetensors", fuzz::safetensors}, {"vocab", fuzz::vocab}, {"tsv", fuzz::tsv}, {"checkpoint", fuzz::checkpoint}};

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

}  // namespace
}  // namespace attograd
