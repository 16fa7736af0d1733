// The programs' checkpoint directories as a user meets them (issue 29): a run
// owns its directory (another run's files refuse, --resume continues them,
// --overwrite replaces them, a second process at the same time is refused), a
// finished run is evaluated instead of inventing numbers, foreign checkpoints
// name the program that wrote them, and SIGTERM/SIGINT stop a run after its
// step with a checkpoint that --resume continues.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "examples/common/checkpoint.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace attograd::app {
namespace {

using testing::ProgramOutcome;

const std::string kCopyTask = std::string(ATTOGRAD_BIN_DIR) + "/copy_task";
const std::string kLm = std::string(ATTOGRAD_BIN_DIR) + "/lm";
const std::vector<std::string> kTinyCopy = {"train", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--enc-layers",
                                            "1", "--dec-layers", "1", "--max-len", "10", "--symbols", "5",
                                            "--min-length", "2", "--max-length", "6", "--samples", "0", "--threads",
                                            "1", "--batch-size", "4", "--eval-size", "4", "--eval-every", "0",
                                            "--warmup", "1"};
const std::vector<std::string> kTinyLm = {"train", "--threads", "1", "--warmup", "2", "--eval-every", "0",
                                          "--context", "16", "--d-model", "16", "--heads", "2", "--d-ff", "32",
                                          "--layers", "1", "--batch-size", "4", "--samples", "0", "--eval-size", "20"};

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& extra) {
  base.insert(base.end(), extra.begin(), extra.end());
  return base;
}

// A program started in the background: its pid, then its outcome.
class Background {
 public:
  Background(const std::string& program, const std::vector<std::string>& args, const std::string& scratch)
      : out_(scratch + "/bg.out"), err_(scratch + "/bg.err") {
    std::vector<std::string> argv_s{program};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      const int out = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(err, 2);
      std::vector<char*> argv;
      for (std::string& a : argv_s) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(program.c_str(), argv.data());
      _exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0 && !done_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  std::string out() const { return testing::read_text(out_); }
  // Waits (up to `seconds`) until `ready` holds; false when it never did.
  bool wait_until(const std::function<bool()>& ready, double seconds = 20) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (ready()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  ProgramOutcome wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    done_ = true;
    ProgramOutcome r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = testing::read_text(out_);
    r.err = testing::read_text(err_);
    return r;
  }

 private:
  std::string out_, err_;
  pid_t pid_ = -1;
  bool done_ = false;
};

class RunDir : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kCopyTask)) << "build the copy_task target first";
    ASSERT_TRUE(fs::exists(kLm)) << "build the lm target first";
    std::string a, b;
    for (int i = 0; i < 400; ++i) {
      a += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
      b += "PACK MY BOX WITH FIVE DOZEN LIQUOR JUGS; " + std::to_string(i * 7) + "!\n";
    }
    testing::write_text(text_a_, a);
    testing::write_text(text_b_, b);
  }
  ProgramOutcome run(const std::string& program, const std::vector<std::string>& args) {
    return testing::run_program(program, args, tmp_.path);
  }
  ProgramOutcome lm(const std::string& text, const std::vector<std::string>& extra) {
    return run(kLm, with(with(kTinyLm, {"--text", text}), extra));
  }

  testing::TempDir tmp_{"run_dir"};
  const std::string ck_ = tmp_ / "ck";
  const std::string text_a_ = tmp_ / "a.txt", text_b_ = tmp_ / "b.txt";
};

// The "loss X" of an lm result line.
std::string loss_of(const std::string& text) {
  std::smatch m;
  return std::regex_search(text, m, std::regex("loss ([0-9.]+)")) ? std::string(m[1]) : "";
}

TEST_F(RunDir, AnotherRunIntoTheSameDirectoryIsRefusedAndLeavesItIntact) {
  // Probe B3: run B replaced run A's tokenizer.json (A's eval loss 2.64 -> 3.47).
  ASSERT_EQ(lm(text_a_, {"--steps", "20", "--quiet", "--checkpoint-dir", ck_}).code, 0);
  const std::string tokenizer = testing::read_text(ck_ + "/tokenizer.json");
  const ProgramOutcome eval_before = run(kLm, {"eval", "--checkpoint", ck_, "--threads", "1"});
  ASSERT_EQ(eval_before.code, 0) << eval_before.err;

  const ProgramOutcome again = lm(text_b_, {"--steps", "5", "--quiet", "--checkpoint-dir", ck_});
  testing::expect_one_line_error(again, "lm", ck_ + " holds checkpoints of another run (lm, up to step 20); pass "
                                              "--resume to continue it, --overwrite to replace it, or another "
                                              "--checkpoint-dir");
  EXPECT_EQ(testing::read_text(ck_ + "/tokenizer.json"), tokenizer);
  EXPECT_EQ(run(kLm, {"eval", "--checkpoint", ck_, "--threads", "1"}).out, eval_before.out);

  const ProgramOutcome replaced = lm(text_b_, {"--steps", "5", "--checkpoint-dir", ck_, "--overwrite"});
  ASSERT_EQ(replaced.code, 0) << replaced.err;
  EXPECT_TRUE(testing::contains(replaced.out, "--overwrite: removed")) << replaced.out;
  EXPECT_NE(testing::read_text(ck_ + "/tokenizer.json"), tokenizer);
  EXPECT_EQ(list_checkpoints(ck_), std::vector<int64_t>{5});

  // --overwrite would remove the checkpoint --init-from starts from: refused, the directory intact.
  const ProgramOutcome self = lm(text_b_, {"--steps", "5", "--checkpoint-dir", ck_, "--overwrite", "--init-from",
                                           ck_ + "/step-00000005.model.safetensors"});
  testing::expect_one_line_error(self, "lm", "lies in --checkpoint-dir");
  EXPECT_EQ(list_checkpoints(ck_), std::vector<int64_t>{5});
}

TEST_F(RunDir, ResumingAFinishedRunEvaluatesItInsteadOfInventingResults) {
  // Probe B8: "held-out loss 0.0000 perplexity 0.00 (0 held-out tokens)", and
  // "done: 20 steps" for --steps 10.
  ASSERT_EQ(lm(text_a_, {"--steps", "20", "--quiet", "--checkpoint-dir", ck_}).code, 0);
  const ProgramOutcome eval = run(kLm, {"eval", "--checkpoint", ck_, "--threads", "1", "--eval-size", "20"});
  for (const std::string steps : {"20", "10"}) {
    SCOPED_TRACE(steps);
    const ProgramOutcome r = lm(text_a_, {"--steps", steps, "--quiet", "--checkpoint-dir", ck_, "--resume"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(testing::contains(r.out, ck_ + " is already at step 20 (--steps " + steps + "): nothing to train"))
        << r.out;
    EXPECT_FALSE(testing::contains(r.out, "done:")) << r.out;
    EXPECT_FALSE(testing::contains(r.out, "loss 0.0000")) << r.out;
    EXPECT_TRUE(testing::contains(r.out, "held-out at step 20: loss ")) << r.out;
    EXPECT_EQ(loss_of(r.out.substr(r.out.find("held-out at step"))), loss_of(eval.out)) << r.out << eval.out;
  }
  const ProgramOutcome copy = run(kCopyTask, with(kTinyCopy, {"--steps", "4", "--checkpoint-dir", tmp_ / "c"}));
  ASSERT_EQ(copy.code, 0) << copy.err;
  const ProgramOutcome done = run(kCopyTask, with(kTinyCopy, {"--steps", "4", "--checkpoint-dir", tmp_ / "c", "--resume"}));
  ASSERT_EQ(done.code, 0) << done.err;
  EXPECT_FALSE(testing::contains(done.out, "nan")) << done.out;
  EXPECT_TRUE(testing::contains(done.out, "held-out at step 4: exact match ")) << done.out;
}

TEST_F(RunDir, ResumeOnANewDirectoryStartsANewRun) {
  // Probe W13: "load_lm_tokenizer: cannot open .../tokenizer.json".
  const ProgramOutcome r = lm(text_a_, {"--steps", "3", "--checkpoint-dir", ck_, "--resume"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(testing::contains(r.out, "nothing to resume in " + ck_ + ": starting a new run")) << r.out;
  EXPECT_EQ(list_checkpoints(ck_), std::vector<int64_t>{3});
  // A checkpoint file without its pair is no new directory.
  fs::remove(ck_ + "/step-00000003.train.safetensors");
  testing::expect_one_line_error(lm(text_a_, {"--steps", "6", "--checkpoint-dir", ck_, "--resume"}), "lm",
                                 "no complete checkpoint");
}

TEST_F(RunDir, ACheckpointOfAnotherProgramNamesIt) {
  // Probe W4: "GPTConfig: bad config JSON: [json.exception.out_of_range.403] key 'vocab' not found".
  const std::string copy_dir = tmp_ / "copy";
  ASSERT_EQ(run(kCopyTask, with(kTinyCopy, {"--steps", "2", "--checkpoint-dir", copy_dir})).code, 0);
  ASSERT_EQ(lm(text_a_, {"--steps", "3", "--quiet", "--checkpoint-dir", ck_}).code, 0);
  const std::string copy_model = copy_dir + "/step-00000002.model.safetensors";
  const std::string lm_model = ck_ + "/step-00000003.model.safetensors";
  testing::expect_one_line_error(run(kLm, {"sample", "--checkpoint", copy_dir}), "lm",
                                 copy_model + " was written by copy_task (task 'copy'), not by lm");
  testing::expect_one_line_error(lm(text_a_, {"--steps", "4", "--checkpoint-dir", copy_dir, "--resume"}), "lm",
                                 copy_model + " was written by copy_task (task 'copy'), not by lm");
  testing::expect_one_line_error(lm(text_a_, {"--steps", "4", "--init-from", copy_dir}), "lm",
                                 copy_model + " was written by copy_task (task 'copy'), not by lm");
  testing::expect_one_line_error(run(kCopyTask, with(kTinyCopy, {"--steps", "4", "--init-from", ck_})), "copy_task",
                                 lm_model + " was written by lm (task 'lm'), not by copy_task");
}

TEST_F(RunDir, LmResumedWithAnotherGlobalBatchSaysSo) {
  // Probe W11: copy_task and translate said so, lm did not.
  ASSERT_EQ(lm(text_a_, {"--steps", "3", "--quiet", "--checkpoint-dir", ck_}).code, 0);
  const ProgramOutcome r = lm(text_a_, {"--steps", "5", "--checkpoint-dir", ck_, "--resume", "--batch-size", "8"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(testing::contains(r.out, "the checkpoint's global batch was 4, now 8")) << r.out;
}

TEST_F(RunDir, ALogOnAFullDiskStopsTheRun) {
  // Probe B7: 81 of 3000 records, the last cut mid-line, exit 0.
  testing::expect_one_line_error(lm(text_a_, {"--steps", "5", "--quiet", "--log", "/dev/full", "--log-every", "1"}),
                                 "lm", "log: cannot write /dev/full: No space left on device");
}

TEST_F(RunDir, SigtermStopsAfterTheStepWithACheckpointThatResumeContinues) {
  // Probe W1: the run died at once, with no word of where.
  const std::vector<std::string> args = with(kTinyCopy, {"--steps", "1000000", "--checkpoint-dir", ck_,
                                                         "--checkpoint-every", "1000000", "--log-every", "1"});
  Background first(kCopyTask, args, tmp_.path);
  ASSERT_TRUE(first.wait_until([&] { return testing::contains(first.out(), "step 5/"); })) << first.out();
  // A second run into the directory while the first trains is refused at once.
  testing::expect_one_line_error(run(kCopyTask, with(args, {"--resume"})), "copy_task",
                                 ck_ + " is in use by another training run (pid " + std::to_string(first.pid()) + ")");
  kill(first.pid(), SIGTERM);
  const ProgramOutcome r = first.wait();
  EXPECT_EQ(r.code, 128 + SIGTERM) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("^copy_task: stopped by SIGTERM at step ([0-9]+); checkpoint "
                                                     "step \\1 in " + ck_ + "; continue with --resume\n$")))
      << r.err;
  const int64_t stopped = std::stoll(m[1]);
  EXPECT_EQ(list_checkpoints(ck_), std::vector<int64_t>{stopped});

  const ProgramOutcome resumed = run(kCopyTask, with(kTinyCopy, {"--steps", std::to_string(stopped + 2),
                                                                 "--checkpoint-dir", ck_, "--resume"}));
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_TRUE(testing::contains(resumed.out, "resumed from " + ck_ + "/step-" + fmt::format("{:08d}", stopped) +
                                                 ".model.safetensors at step " + std::to_string(stopped)))
      << resumed.out;
  EXPECT_TRUE(testing::contains(resumed.out, "done: " + std::to_string(stopped + 2) + " steps")) << resumed.out;
}

TEST_F(RunDir, SigintWithoutACheckpointDirSaysNothingWasWritten) {
  Background run(kCopyTask, with(kTinyCopy, {"--steps", "1000000", "--log-every", "1"}), tmp_.path);
  ASSERT_TRUE(run.wait_until([&] { return testing::contains(run.out(), "step 3/"); })) << run.out();
  kill(run.pid(), SIGINT);
  const ProgramOutcome r = run.wait();
  EXPECT_EQ(r.code, 128 + SIGINT) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("^copy_task: stopped by SIGINT at step [0-9]+; no checkpoint was "
                                                  "written")))
      << r.err;
}

}  // namespace
}  // namespace attograd::app
