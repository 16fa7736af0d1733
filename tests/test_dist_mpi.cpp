// Data-parallel training under `mpirun -np 2` (label "mpi"; skipped when MPI
// is not built): the collectives across real processes, N=2 ranks with batch b
// against one process with batch 2b (copy_task and lm), resuming with another
// number of processes, and a failing rank ending the whole job with one line.
#include <chrono>
#include <map>

#include <nlohmann/json.hpp>

#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

const std::string kBin = ATTOGRAD_BIN_DIR;
const std::string kMpiexec = ATTOGRAD_MPIEXEC;  // "" when the tests skip (ATTOGRAD_MPI_SKIP says why)

// A tiny copy-task model; its losses are printed to the JSON log every step.
std::vector<std::string> tiny(int64_t batch, const std::string& log) {
  return {"train", "--steps", "20", "--warmup", "2", "--d-model", "16", "--heads", "2", "--d-ff", "32",
          "--enc-layers", "1", "--dec-layers", "1", "--dropout", "0", "--eval-size", "32", "--samples", "0",
          "--threads", "1", "--log-every", "1", "--log", log, "--batch-size", std::to_string(batch)};
}

// A few KB of text and a tiny language model trained 12 steps on it.
std::string small_text() {
  const std::vector<std::string> words = {"the ", "cat ", "sat ", "on ", "a ", "mat.\n"};
  std::string text;
  for (int i = 0; i < 400; ++i) text += words[(i * 5 + i / 7) % 6];
  return text;
}
std::vector<std::string> tiny_lm(const std::string& text, int64_t batch, const std::string& log) {
  return {"train", "--text", text, "--context", "16", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--layers",
          "1", "--steps", "12", "--warmup", "2", "--eval-size", "8", "--samples", "0", "--threads", "1",
          "--log-every", "1", "--log", log, "--batch-size", std::to_string(batch)};
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// step -> loss of the training records, and the eval records, of a JSON-lines log.
struct Log {
  std::map<int64_t, double> loss;
  std::vector<nlohmann::json> evals;
};
Log read_log(const std::string& path) {
  Log log;
  for (const std::string& line : lines_of(read_text(path))) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) log.loss[j["step"].get<int64_t>()] = j["loss"].get<double>();
    if (j.contains("eval_loss")) log.evals.push_back(j);
  }
  return log;
}

double largest_relative_difference(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (const auto& [step, loss] : a) {
    EXPECT_TRUE(b.count(step)) << "step " << step;
    if (b.count(step)) worst = std::max(worst, std::abs(loss - b.at(step)) / std::abs(loss));
  }
  return worst;
}

// Two logs of `steps` steps and one evaluation agree to float32 rounding:
// per-step losses within 1e-6 relative (the largest difference is returned and
// recorded), the held-out loss within 1e-6.
double expect_same_run(const Log& one, const Log& two, size_t steps) {
  EXPECT_EQ(one.loss.size(), steps);
  const double worst = largest_relative_difference(one.loss, two.loss);
  EXPECT_LT(worst, 1e-6);
  ::testing::Test::RecordProperty("largest_relative_loss_difference", std::to_string(worst));
  EXPECT_EQ(one.evals.size(), 1u);
  EXPECT_EQ(two.evals.size(), 1u);
  if (!one.evals.empty() && !two.evals.empty()) {
    EXPECT_NEAR(one.evals[0]["eval_loss"].get<double>(), two.evals[0]["eval_loss"].get<double>(), 1e-6);
  }
  return worst;
}

int64_t lines_with(const std::string& text, const std::string& part) {
  int64_t n = 0;
  for (const std::string& line : lines_of(text)) n += contains(line, part);
  return n;
}

class DistMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kMpiexec.empty()) GTEST_SKIP() << ATTOGRAD_MPI_SKIP;
  }
  // `np` processes of `program`, killed after 60 s so a hang fails instead of hanging.
  ProgramOutcome mpirun(int np, const std::string& program, const std::vector<std::string>& args) {
    return run_program("timeout", plus({"-k", "5", "60", kMpiexec, "--allow-run-as-root", "--oversubscribe", "-np",
                                        std::to_string(np), kBin + "/" + program}, args), dir_.path);
  }
  ProgramOutcome one(const std::string& program, const std::vector<std::string>& args) {
    return run_program(kBin + "/" + program, args, dir_.path);
  }
  static std::vector<std::string> error_lines(const ProgramOutcome& r) {
    std::vector<std::string> errors;
    for (const std::string& line : lines_of(r.err))
      if (contains(line, ": error: ")) errors.push_back(line);
    return errors;
  }
  TempDir dir_{"dist_mpi"};
};

TEST_F(DistMpi, CollectivesAcrossTwoProcesses) {
  const auto r = mpirun(2, "dist_check", {"collectives"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "dist_check: ok")) << r.out << r.err;
}

TEST_F(DistMpi, OverlappedReductionEqualsTheBlockingOneBitForBit) {
  const auto r = mpirun(2, "dist_check", {"overlap"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "dist_check: ok")) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "native order")) << r.out;
}

// 2 ranks x batch 4 train on exactly the rows 1 rank x batch 8 does; the
// sums differ only in order, so the losses agree to float32 rounding.
TEST_F(DistMpi, TwoRanksMatchOneProcessWithTheGlobalBatch) {
  const auto a = one("copy_task", tiny(8, dir_ / "one.jsonl"));
  ASSERT_EQ(a.code, 0) << a.err;
  const auto b = mpirun(2, "copy_task", tiny(4, dir_ / "two.jsonl"));
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_TRUE(contains(b.out, "data-parallel: 2 processes (MPI) x batch 4 = global batch 8")) << b.out;
  for (const std::string line : {"copy_task: copy", "eval step 20", "done: 20 steps"})
    EXPECT_EQ(lines_with(b.out, line), 1) << "only rank 0 prints: " << b.out;
  const Log la = read_log(dir_ / "one.jsonl"), lb = read_log(dir_ / "two.jsonl");
  expect_same_run(la, lb, 20);  // measured 4.5e-8
  ASSERT_EQ(la.evals.size(), 1u);
  ASSERT_EQ(lb.evals.size(), 1u);
  EXPECT_EQ(la.evals[0]["token_accuracy"], lb.evals[0]["token_accuracy"]);
  EXPECT_EQ(la.evals[0]["exact_match"], lb.evals[0]["exact_match"]);
}

// The language model through the same loop: 2 ranks x batch 3 train on the
// windows 1 rank x batch 6 draws, each rank its own rows of every batch.
TEST_F(DistMpi, TwoRanksOfTheLanguageModelMatchOneProcessWithTheGlobalBatch) {
  write_text(dir_ / "text.txt", small_text());
  const auto a = one("lm", tiny_lm(dir_ / "text.txt", 6, dir_ / "one.jsonl"));
  ASSERT_EQ(a.code, 0) << a.err;
  const auto b = mpirun(2, "lm", tiny_lm(dir_ / "text.txt", 3, dir_ / "two.jsonl"));
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_TRUE(contains(b.out, "data-parallel: 2 processes (MPI) x batch 3 = global batch 6")) << b.out;
  for (const std::string line : {"unigram baseline", "eval step 12", "done: 12 steps"})
    EXPECT_EQ(lines_with(b.out, line), 1) << "only rank 0 prints: " << b.out;
  const Log la = read_log(dir_ / "one.jsonl"), lb = read_log(dir_ / "two.jsonl");
  const double worst = expect_same_run(la, lb, 12);  // measured 9.9e-8
  std::printf("lm: largest relative loss difference, 2 ranks x 3 against 1 x 6: %.3g\n", worst);
  ASSERT_EQ(la.evals.size(), 1u);
  ASSERT_EQ(lb.evals.size(), 1u);
  EXPECT_NEAR(la.evals[0]["bits_per_char"].get<double>(), lb.evals[0]["bits_per_char"].get<double>(), 1e-6);
}

// With the fixed reduction order two runs are the same bit for bit.
TEST_F(DistMpi, TheFixedOrderRepeatsBitForBit) {
  for (const std::string run : {"a", "b"}) {
    const auto r = mpirun(2, "copy_task", plus(tiny(4, dir_ / (run + ".jsonl")), {"--allreduce-order", "fixed"}));
    ASSERT_EQ(r.code, 0) << r.err;
  }
  const Log a = read_log(dir_ / "a.jsonl"), b = read_log(dir_ / "b.jsonl");
  ASSERT_EQ(a.loss.size(), 20u);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.evals[0]["eval_loss"], b.evals[0]["eval_loss"]);
}

// Stopped on 2 ranks x batch 4, resumed on 1 process x batch 8 (the same
// global batch): the same steps as one uninterrupted process.
TEST_F(DistMpi, ResumesOnAnotherNumberOfProcesses) {
  const auto a = one("copy_task", tiny(8, dir_ / "one.jsonl"));
  ASSERT_EQ(a.code, 0) << a.err;
  const std::string ck = dir_ / "ck", log = dir_ / "resumed.jsonl";
  const auto b = mpirun(2, "copy_task", plus(tiny(4, log), {"--checkpoint-dir", ck, "--stop-after", "10"}));
  ASSERT_EQ(b.code, 0) << b.err;
  const auto c = one("copy_task", plus(tiny(8, log), {"--checkpoint-dir", ck, "--resume"}));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_TRUE(contains(c.out, "resumed from")) << c.out;
  EXPECT_LT(largest_relative_difference(read_log(dir_ / "one.jsonl").loss, read_log(log).loss), 1e-5);
}

// The language model stopped on 2 ranks x batch 3 and resumed on 1 process x
// batch 6: the window generator goes on where it was, so the steps are one
// uninterrupted process's.
TEST_F(DistMpi, TheLanguageModelResumesOnAnotherNumberOfProcesses) {
  write_text(dir_ / "text.txt", small_text());
  const auto a = one("lm", tiny_lm(dir_ / "text.txt", 6, dir_ / "one.jsonl"));
  ASSERT_EQ(a.code, 0) << a.err;
  const std::string ck = dir_ / "ck", log = dir_ / "resumed.jsonl";
  const auto b =
      mpirun(2, "lm", plus(tiny_lm(dir_ / "text.txt", 3, log), {"--checkpoint-dir", ck, "--stop-after", "6"}));
  ASSERT_EQ(b.code, 0) << b.err;
  const auto c = one("lm", plus(tiny_lm(dir_ / "text.txt", 6, log), {"--checkpoint-dir", ck, "--resume"}));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_TRUE(contains(c.out, "resumed from")) << c.out;
  EXPECT_LT(largest_relative_difference(read_log(dir_ / "one.jsonl").loss, read_log(log).loss), 1e-5);
}

TEST_F(DistMpi, ResumesWithAnotherGlobalBatchFromTheNextUnseenExample) {
  const std::string ck = dir_ / "ck";
  const auto b = one("copy_task", plus(tiny(8, dir_ / "a.jsonl"), {"--checkpoint-dir", ck, "--stop-after", "10"}));
  ASSERT_EQ(b.code, 0) << b.err;
  const auto c = mpirun(2, "copy_task", plus(tiny(2, dir_ / "b.jsonl"), {"--checkpoint-dir", ck, "--resume"}));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_TRUE(contains(c.out, "the checkpoint's global batch was 8, now 4: continuing at batch 20 of epoch 0"))
      << c.out;
  EXPECT_EQ(read_log(dir_ / "b.jsonl").loss.size(), 10u);
}

// Rank 1 fails on a file while rank 0 waits in an allreduce it never joins.
TEST_F(DistMpi, AFailingRankEndsTheJobWithOneLine) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = mpirun(2, "dist_check", {"raise"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, 124) << "timed out: the job hung";
  EXPECT_LT(seconds, 15);
  const auto errors = error_lines(r);
  ASSERT_EQ(errors.size(), 1u) << r.err;
  EXPECT_EQ(errors[0], "dist_check: error: rank 1 of 2: data: cannot read /nonexistent/train.tsv: No such file or "
                       "directory");
  EXPECT_FALSE(contains(r.out, "not stopped")) << r.out;
}

// Every rank diverges; rank 0 reports once, and the checkpoints left are whole.
// Skip mode with the overlapped reducer: a step whose loss is not finite is
// skipped by every rank together (the loss is summed before backward, so no
// rank starts bucket collectives the others do not), and the job finishes.
TEST_F(DistMpi, NonFiniteStepsAreSkippedOnEveryRankTogether) {
  const auto r = mpirun(2, "copy_task", plus(tiny(4, dir_ / "log.jsonl"), {"--lr", "1e6", "--on-nonfinite", "skip",
                                                                           "--max-consecutive-skips", "100"}));
  EXPECT_NE(r.code, 124) << "timed out: the job hung";
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "step(s) skipped for non-finite values")) << r.out;
  EXPECT_TRUE(contains(r.out, "done: 20 steps")) << r.out;
}

TEST_F(DistMpi, ANonFiniteLossEndsTheJobWithOneLineAndWholeCheckpoints) {
  const std::string ck = dir_ / "ck";
  const auto r = mpirun(2, "copy_task",
                        plus(tiny(4, dir_ / "log.jsonl"), {"--lr", "1e6", "--checkpoint-dir", ck,
                                                           "--checkpoint-every", "1"}));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, 124) << "timed out: the job hung";
  const auto errors = error_lines(r);
  ASSERT_EQ(errors.size(), 1u) << r.err;
  EXPECT_TRUE(contains(errors[0], "copy_task: error: rank ")) << errors[0];
  EXPECT_TRUE(contains(errors[0], "non-finite")) << errors[0];
  for (const auto& e : std::filesystem::directory_iterator(ck)) {
    EXPECT_FALSE(contains(e.path().filename().string(), ".tmp.")) << e.path();
    if (!e.path().string().ends_with(".model.safetensors")) continue;
    const auto ev = one("copy_task", {"eval", "--checkpoint", e.path().string(), "--eval-size", "4"});
    EXPECT_EQ(ev.code, 0) << e.path() << ev.err;
  }
}

}  // namespace

TEST_F(DistMpi, TranslateAveragesTheLastCheckpointsOnRankZeroAndTestsThatModel) {
  // Rank 0 writes the checkpoints and averages them; the test line printed
  // after two ranks trained is the averaged model's, as one process scores it.
  const std::string ck = dir_ / "ck";
  const auto r = mpirun(2, "translate", {"train", "--lang", "fr", "--steps", "20", "--warmup", "2", "--d-model", "16",
                                         "--heads", "2", "--d-ff", "32", "--enc-layers", "1", "--dec-layers", "1",
                                         "--eval-every", "10", "--eval-size", "32", "--samples", "0", "--threads", "1",
                                         "--batch-size", "8", "--checkpoint-dir", ck, "--average-last", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines_with(r.out, "averaged the last 2 checkpoints"), 1) << r.out;
  const auto e = one("translate", {"eval", "--checkpoint", ck + "/average.model.safetensors", "--split", "test",
                                   "--threads", "1"});
  ASSERT_EQ(e.code, 0) << e.err;
  // "test (N sentences...): <metrics>" in both: the metrics must be the same.
  auto metrics = [](const std::string& out) {
    for (const std::string& line : lines_of(out))
      if (line.starts_with("test (")) return line.substr(line.find("): ") + 3);
    return std::string();
  };
  ASSERT_FALSE(metrics(r.out).empty()) << r.out;
  EXPECT_EQ(metrics(r.out), metrics(e.out)) << r.out << "\n" << e.out;
}
