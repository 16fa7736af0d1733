// The checks the training programs make before they spend work
// (examples/common/preflight.h): an output that cannot be written, or a model
// that cannot fit in memory, stops the program at start-up, within seconds,
// with exit code 2 and one line, before the start-up header is printed.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include <attograd/autograd/autograd.h>
#include "examples/common/backprop_views.h"
#include "examples/common/preflight.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace attograd::app {
namespace {

const std::string kData = std::string(ATTOGRAD_SOURCE_DIR) + "/data/numbers";

struct Timed {
  testing::ProgramOutcome r;
  double seconds;
};

Timed run(const std::string& program, const std::vector<std::string>& args, const std::string& scratch) {
  const auto t0 = std::chrono::steady_clock::now();
  testing::ProgramOutcome r = testing::run_program(std::string(ATTOGRAD_BIN_DIR) + "/" + program, args, scratch);
  return {r, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

TEST(Preflight, UnwritableOutputsStopEveryProgramAtStartUp) {
  testing::TempDir tmp("preflight");
  // Each would otherwise train (the copy task for 50 steps, on the defaults)
  // and fail at its first write.
  const std::vector<std::string> copy = {"train", "--steps", "60", "--warmup", "10", "--eval-every", "50", "--quiet"};
  const std::vector<std::string> tr = {"train", "--data", kData, "--steps", "60", "--warmup", "10", "--eval-every", "50",
                                       "--quiet"};
  struct Case {
    std::string program;
    std::vector<std::string> args;
    std::string phrase;
  };
  const std::vector<Case> cases = {
      {"copy_task", {"--checkpoint-dir", "/proc/nope"}, "checkpoint: cannot create directory /proc/nope"},
      {"copy_task", {"--log", "/proc/nope/log.jsonl"}, "log: cannot open /proc/nope/log.jsonl for writing"},
      {"copy_task", {"--checkpoint-dir", "/proc/self"}, "checkpoint: cannot write in /proc/self"},
      {"translate", {"--checkpoint-dir", "/proc/nope"}, "checkpoint: cannot create directory /proc/nope"},
      {"translate", {"--log", "/proc/nope/log.jsonl"}, "log: cannot open /proc/nope/log.jsonl for writing"},
      {"heads_study", {"--quick", "--out", "/proc/nope"}, "out: cannot create directory /proc/nope"},
  };
  for (const Case& c : cases) {
    std::string line = c.program;
    for (const std::string& a : c.args) line += " " + a;
    SCOPED_TRACE(line);
    std::vector<std::string> args = c.program == "copy_task" ? copy : c.program == "translate" ? tr : std::vector<std::string>{"--data", kData};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Timed t = run(c.program, args, tmp.path);
    testing::expect_one_line_error(t.r, c.program, c.phrase);
    EXPECT_EQ(t.r.out, "") << "work started before the check";
    EXPECT_LT(t.seconds, 10.0);
  }
}

// W14: the optional outputs too, before the work they would follow.
TEST(Preflight, OptionalOutputsAreCheckedAtStartUp) {
  testing::TempDir tmp("preflight");
  const std::string missing = tmp / "no/such/dir";
  const std::vector<std::string> copy = {"train", "--steps", "60", "--warmup", "10", "--eval-every", "50", "--quiet"};
  struct Case {
    std::string program;
    std::vector<std::string> args;
    std::string phrase;
  };
  const std::vector<Case> cases = {
      {"copy_task", {"--graph-out", missing + "/g.dot"},
       "graph-out: cannot open " + missing + "/g.dot for writing: No such file or directory"},
      {"copy_task", {"--trace-backward=" + missing + "/t.jsonl"},
       "trace-backward: cannot open " + missing + "/t.jsonl for writing: No such file or directory"},
      {"translate", {"--graph-out", missing + "/g.dot", "--data", kData}, "graph-out: cannot open"},
      {"lm", {"--graph-out", missing + "/g.dot", "--text", kData + "/train.tsv"}, "graph-out: cannot open"},
      // Before the checkpoint is even read (it does not exist).
      {"copy_task", {"eval", "--checkpoint", tmp / "none", "--dump-batch", missing + "/b.safetensors"},
       "dump-batch: cannot open " + missing + "/b.safetensors for writing"},
      {"lm", {"sample", "--checkpoint", tmp / "none", "--attention-out", "/proc/nope"},
       "attention-out: cannot create directory /proc/nope"},
      {"translate", {"translate", "--checkpoint", tmp / "none", "--attention-out", "/proc/nope", "one"},
       "attention-out: cannot create directory /proc/nope"},
      {"heads_study", {"--convert-gqa", tmp / "none", "--kv-heads", "1", "--to", missing + "/c.model.safetensors"},
       "to: cannot open " + missing + "/c.model.safetensors for writing"},
      {"higher_order", {"--dot", missing + "/p.dot"}, "--dot: cannot open " + missing + "/p.dot for writing"},
  };
  for (const Case& c : cases) {
    std::string line = c.program;
    for (const std::string& a : c.args) line += " " + a;
    SCOPED_TRACE(line);
    std::vector<std::string> args;
    if (c.program != "heads_study" && c.program != "higher_order" && c.args[0].starts_with("--"))
      args = c.program == "lm" ? std::vector<std::string>{"train", "--quiet"} : copy;
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Timed t = run(c.program, args, tmp.path);
    testing::expect_one_line_error(t.r, c.program, c.phrase);
    EXPECT_EQ(t.r.out, "") << "work started before the check";
    EXPECT_LT(t.seconds, 10.0);
  }
}

// W8: under ulimit -v the memory preflight and the header use what the limit leaves.
TEST(Preflight, TheAvailableMemoryHonoursUlimit) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizer build: its shadow memory needs more address space than the limit";
#endif
  testing::TempDir tmp("preflight");
  auto under = [&](const std::string& kb, const std::vector<std::string>& args) {
    std::string cmd = fmt::format("ulimit -v {} && exec {}/copy_task", kb, ATTOGRAD_BIN_DIR);
    for (const std::string& a : args) cmd.append(" ").append(testing::shell_quote(a));
    return testing::run_program("/bin/sh", {"-c", cmd}, tmp.path);
  };
  const testing::ProgramOutcome ok = under("3000000", {"train", "--steps", "1", "--warmup", "0", "--eval-size", "4",
                                                       "--samples", "0", "--quiet", "--threads", "1"});
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find(" GB available, ulimit -v) | "), std::string::npos) << ok.out;
  // A model of about 1.1 GB (weights, gradients, AdamW) fits MemAvailable here, not the 1 GB limit.
  const testing::ProgramOutcome big = under("1000000", {"train", "--d-model", "2048", "--d-ff", "8192", "--quiet"});
  testing::expect_one_line_error(big, "copy_task", "memory: this run needs about");
  EXPECT_NE(big.err.find("is available (ulimit -v); hint:"), std::string::npos) << big.err;
}

// "backprop views: cannot write g" once gave no reason.
TEST(Preflight, AViewThatCannotBeWrittenSaysWhy) {
  testing::TempDir tmp("preflight");
  const Tensor x = testing::randn_leaf({3}, 1);
  const Tensor loss = sum(x * x);
  BackwardTrace trace;
  loss.backward();
  for (const BackpropViews& v : {BackpropViews{.graph_out = tmp / "no/g.dot"},
                                 BackpropViews{.trace_backward = tmp / "no/t.jsonl"}})
    testing::expect_error<IOError>([&] { write_backprop_views(v, loss, trace, {}); },
                                   {"backprop views: cannot write " + tmp.path + "/no/", ": No such file or directory"});
}

TEST(Preflight, AWritableDirectoryIsCreatedAndLeftClean) {
  testing::TempDir tmp("preflight");
  const std::string dir = tmp / "a/b/ck";
  check_dir_writable(dir, "checkpoint");
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_empty(dir));
  const std::string log = tmp / "log.jsonl";
  check_file_writable(log, "log");
  EXPECT_FALSE(fs::exists(log));  // created to check, then removed
  testing::write_text(log, "{\"step\": 1}\n");
  check_file_writable(log, "log");
  EXPECT_EQ(testing::read_text(log), "{\"step\": 1}\n");  // an existing log is not touched
  testing::expect_error<IOError>([&] { check_dir_writable(log, "checkpoint"); },
                                 {"checkpoint: cannot create directory " + log});
}

TEST(Preflight, AModelTooBigForAnyMachineStopsBeforeAllocating) {
  testing::TempDir tmp("preflight");
  // About 7.7 TB of weights, gradients and AdamW moments.
  const std::vector<std::string> huge = {"train", "--d-model", "16384", "--d-ff", "65536", "--heads", "16",
                                         "--enc-layers", "64", "--dec-layers", "64", "--quiet"};
  for (const std::string program : {"copy_task", "translate"}) {
    SCOPED_TRACE(program);
    std::vector<std::string> args = huge;
    if (program == "translate") args.insert(args.end(), {"--data", kData});
    const Timed t = run(program, args, tmp.path);
    testing::expect_one_line_error(t.r, program, "memory: this run needs about");
    EXPECT_NE(t.r.err.find("TB"), std::string::npos) << t.r.err;
    EXPECT_NE(t.r.err.find("available (MemAvailable); hint:"), std::string::npos) << t.r.err;
    EXPECT_NE(t.r.err.find("--force"), std::string::npos) << t.r.err;
    EXPECT_EQ(t.r.out, "");
    EXPECT_LT(t.seconds, 10.0);
  }
  // The header of a run that fits shows the estimate.
  const Timed ok = run("copy_task", {"train", "--steps", "1", "--warmup", "0", "--eval-size", "4", "--samples", "0",
                                     "--quiet"}, tmp.path);
  ASSERT_EQ(ok.r.code, 0) << ok.r.err;
  EXPECT_NE(ok.r.out.find(" | memory ~"), std::string::npos) << ok.r.out;
  EXPECT_NE(ok.r.out.find(" available) | "), std::string::npos) << ok.r.out;
}

// lm has the same check: the probe's --d-model 4096 --d-ff 16384 --layers 8
// (about 38 GB with the default batch) ended in std::bad_alloc after 9 s
// under a 2 GB limit; here it stops before reading its text, and the header
// of a run that fits shows the estimate.
TEST(Preflight, LMStopsAModelTooBigBeforeAllocating) {
  testing::TempDir tmp("preflight");
  std::string text;
  for (int i = 0; i < 400; ++i) text += i % 7 ? "some words " : "and a line\n";
  testing::write_text(tmp / "text.txt", text);
  const Timed big = run("lm", {"train", "--text", tmp / "text.txt", "--d-model", "16384", "--d-ff", "65536", "--heads",
                               "16", "--layers", "64", "--threads", "1", "--quiet"}, tmp.path);
  testing::expect_one_line_error(big.r, "lm", "memory: this run needs about");
  EXPECT_NE(big.r.err.find("--force"), std::string::npos) << big.r.err;
  EXPECT_EQ(big.r.out, "");
  EXPECT_LT(big.seconds, 10.0);
  const Timed ok = run("lm", {"train", "--text", tmp / "text.txt", "--context", "16", "--d-model", "16", "--heads", "2",
                              "--d-ff", "32", "--layers", "1", "--batch-size", "4", "--steps", "1", "--warmup", "0",
                              "--eval-every", "0", "--eval-size", "2", "--samples", "0", "--threads", "1", "--quiet",
                              "--force"}, tmp.path);
  ASSERT_EQ(ok.r.code, 0) << ok.r.err;
  EXPECT_NE(ok.r.out.find(" | memory ~"), std::string::npos) << ok.r.out;
}

}  // namespace
}  // namespace attograd::app
