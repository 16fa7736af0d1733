// The copy_task program end to end, run as a subprocess: a short training run
// learns (held-out accuracy far above chance), eval and decode agree with it,
// resuming through the CLI is exact, and every kind of bad input gets exit
// code 2 and exactly one line on stderr that says what was wrong.
//
// Labelled "slow" (tests/CMakeLists.txt); about ten seconds on an idle machine.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <attograd/autograd/io/safetensors.h>
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

const std::string kProgram = std::string(ATTOGRAD_BIN_DIR) + "/copy_task";

using Outcome = attograd::testing::ProgramOutcome;
using attograd::testing::lines_of;
using attograd::testing::without_run_id;
using attograd::testing::read_text;
using attograd::testing::write_text;

// A small, fast model and task; every run below starts from these flags.
const std::vector<std::string> kSmall = {"--d-model", "32", "--heads", "2", "--d-ff", "64", "--enc-layers", "1",
                                         "--dec-layers", "1", "--max-len", "16", "--symbols", "6", "--min-length",
                                         "2", "--max-length", "5", "--quiet", "--samples", "0", "--threads", "1"};

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class CopyTaskProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kProgram)) << kProgram
                                      << " does not exist; build the copy_task target first "
                                         "(cmake --build <build dir> --target copy_task)";
  }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // Runs copy_task with `args` (and `input` on stdin), capturing both streams.
  Outcome run(const std::vector<std::string>& args, const std::string& input = "") {
    return attograd::testing::run_program(kProgram, args, dir_, input);
  }

  attograd::testing::TempDir tmp_{"integration"};
  std::string dir_ = tmp_.path;
};

// "done: ... held-out exact match 63.50%, token accuracy 89.48%" -> {"63.50", "89.48"}
std::pair<std::string, std::string> done_accuracies(const std::string& out) {
  static const std::regex re(R"(done: .*held-out exact match ([0-9.]+)%, token accuracy ([0-9.]+)%)");
  std::smatch m;
  if (!std::regex_search(out, m, re)) return {};
  return {m[1], m[2]};
}

}  // namespace

TEST_F(CopyTaskProgram, ShortTrainingLearnsAndEvalAndDecodeAgree) {
  const std::string ck = path("ck");
  const Outcome t = run(std::vector<std::string>{"train"} + kSmall +
                    std::vector<std::string>{"--steps", "400", "--batch-size", "32", "--lr", "3e-3", "--warmup", "30",
                                             "--eval-every", "0", "--eval-size", "200", "--checkpoint-dir", ck});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(t.err, "");
  const auto [exact, token] = done_accuracies(t.out);
  ASSERT_FALSE(token.empty()) << "no 'done:' line in:\n" << t.out;
  // Chance: about 1 in 6 per token, about 6^-L for a whole sequence of length L >= 2.
  EXPECT_GT(std::stod(token), 50.0) << t.out;
  EXPECT_GT(std::stod(exact), 20.0) << t.out;
  EXPECT_TRUE(fs::exists(ck + "/step-00000400.model.safetensors"));
  EXPECT_TRUE(fs::exists(ck + "/step-00000400.train.safetensors"));
  EXPECT_TRUE(fs::exists(ck + "/best.model.safetensors"));

  // eval on the same held-out set (same seed and size) reproduces the final numbers.
  const Outcome e = run({"eval", "--checkpoint", ck, "--eval-size", "200"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("held-out (200 sequences, seed 1)"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("token accuracy " + token + "%"), std::string::npos) << e.out << "\nvs\n" << t.out;
  EXPECT_NE(e.out.find("exact match " + exact + "%"), std::string::npos) << e.out << "\nvs\n" << t.out;

  // decode: one output line per input sequence, from arguments or stdin.
  const Outcome d = run({"decode", "--checkpoint", ck + "/best.model.safetensors", "a b c"});
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_EQ(d.err, "");
  ASSERT_EQ(lines_of(d.out).size(), 1u) << d.out;
  EXPECT_FALSE(lines_of(d.out)[0].empty());
  const Outcome s = run({"decode", "--checkpoint", ck}, "a b c\nf e d c\n");
  ASSERT_EQ(s.code, 0) << s.err;
  const auto out = lines_of(s.out);
  ASSERT_EQ(out.size(), 2u) << s.out;
  EXPECT_EQ(out[0], lines_of(d.out)[0]);  // the same model (best == last here) decodes the same way
}

TEST_F(CopyTaskProgram, ResumingThroughTheCliIsExact) {
  // 20 steps straight vs 10 + resume to 20, with dropout and a shuffled
  // finite training set: the final models are the same file, byte for byte.
  const std::vector<std::string> base = std::vector<std::string>{"train"} + kSmall +
                                        std::vector<std::string>{"--dropout", "0.1", "--train-size", "50",
                                                                 "--batch-size", "8", "--schedule", "warmup",
                                                                 "--warmup", "5", "--eval-every", "0", "--eval-size",
                                                                 "20"};
  const std::string whole = path("whole"), split = path("split");
  const Outcome a = run(base + std::vector<std::string>{"--steps", "20", "--checkpoint-dir", whole});
  ASSERT_EQ(a.code, 0) << a.err;
  const Outcome b1 = run(base + std::vector<std::string>{"--steps", "10", "--checkpoint-dir", split});
  ASSERT_EQ(b1.code, 0) << b1.err;
  const Outcome b2 = run(base + std::vector<std::string>{"--steps", "20", "--checkpoint-dir", split, "--resume"});
  ASSERT_EQ(b2.code, 0) << b2.err;

  const std::string fa = without_run_id(whole + "/step-00000020.model.safetensors");
  const std::string fb = without_run_id(split + "/step-00000020.model.safetensors");
  ASSERT_FALSE(fa.empty());
  EXPECT_TRUE(fa == fb) << "the resumed run's final model differs from the uninterrupted run's";
  EXPECT_NE(fa, without_run_id(split + "/step-00000010.model.safetensors"));
  // The same final loss and held-out results, as printed.
  auto done = [](const std::string& out) {
    const size_t at = out.find("final loss");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  ASSERT_FALSE(done(a.out).empty()) << a.out;
  EXPECT_EQ(done(a.out), done(b2.out));

  // eval rebuilds the same held-out set (disjoint from the 50 training
  // sequences) from the checkpoint's task record and reproduces the numbers.
  const auto [exact, token] = done_accuracies(a.out);
  const Outcome e = run({"eval", "--checkpoint", whole, "--eval-size", "20"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("token accuracy " + token + "%  exact match " + exact + "%"), std::string::npos)
      << e.out << "\nvs\n" << a.out;
}

TEST_F(CopyTaskProgram, StopAfterThenResumeIsExactWithACosineSchedule) {
  // --stop-after N ends a 2N-step run at N as if it were interrupted, so the
  // cosine schedule (which spans --steps) resumes exactly.
  const std::vector<std::string> base =
      std::vector<std::string>{"train"} + kSmall +
      std::vector<std::string>{"--dropout", "0.1", "--batch-size", "8", "--schedule", "cosine", "--warmup", "4",
                               "--steps", "16", "--eval-every", "0", "--eval-size", "20"};
  const std::string whole = path("whole"), split = path("split");
  const Outcome a = run(base + std::vector<std::string>{"--checkpoint-dir", whole});
  ASSERT_EQ(a.code, 0) << a.err;
  const Outcome b1 = run(base + std::vector<std::string>{"--checkpoint-dir", split, "--stop-after", "8"});
  ASSERT_EQ(b1.code, 0) << b1.err;
  EXPECT_EQ(b1.out.find("done:"), std::string::npos) << "a stopped run has no final summary:\n" << b1.out;
  EXPECT_TRUE(fs::exists(split + "/step-00000008.model.safetensors"));
  EXPECT_FALSE(fs::exists(split + "/step-00000016.model.safetensors"));
  const Outcome b2 = run(base + std::vector<std::string>{"--checkpoint-dir", split, "--resume"});
  ASSERT_EQ(b2.code, 0) << b2.err;
  const std::string fa = without_run_id(whole + "/step-00000016.model.safetensors");
  ASSERT_FALSE(fa.empty());
  EXPECT_TRUE(fa == without_run_id(split + "/step-00000016.model.safetensors"))
      << "the stopped-and-resumed run's final model differs from the uninterrupted run's";
}

TEST_F(CopyTaskProgram, EvalDumpsABatchWithItsLogits) {
  const std::string ck = path("ck"), dump = path("batch.safetensors");
  ASSERT_EQ(run(std::vector<std::string>{"train"} + kSmall +
                std::vector<std::string>{"--steps", "2", "--warmup", "1", "--eval-size", "8", "--checkpoint-dir", ck})
                .code,
            0);
  const Outcome e = run({"eval", "--checkpoint", ck, "--eval-size", "8", "--dump-batch", dump});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("wrote " + dump + " (8 sequences and their logits [8, "), std::string::npos) << e.out;
  const std::string bytes = read_text(dump);
  for (const char* name : {"\"src\"", "\"tgt_in\"", "\"src_key_padding_mask\"", "\"logits\""})
    EXPECT_NE(bytes.find(name), std::string::npos) << name << " missing from the dumped batch";
}

TEST_F(CopyTaskProgram, BadInputGetsOneLineAndExitCode2) {
  // A tiny checkpoint to resume, evaluate and decode against, and a corrupt one.
  const std::string ck = path("ck"), corrupt = path("corrupt");
  const Outcome t = run(std::vector<std::string>{"train"} + kSmall +
                    std::vector<std::string>{"--steps", "2", "--warmup", "1", "--batch-size", "4", "--eval-size",
                                             "8", "--checkpoint-dir", ck});
  ASSERT_EQ(t.code, 0) << t.err;
  fs::create_directories(corrupt);
  write_text(corrupt + "/step-00000001.model.safetensors", "garbage, not a safetensors file");
  write_text(corrupt + "/step-00000001.train.safetensors", "more garbage");

  struct Case {
    std::string name;
    std::vector<std::string> args;
    std::string phrase;  // must appear in the one stderr line
  };
  const std::vector<Case> cases = {
      {"unknown flag", {"train", "--bogus-flag"}, "bogus-flag"},
      {"heads not dividing d_model", {"train", "--heads", "3"}, "heads (3) must divide d_model (64)"},
      {"negative size", {"train", "--d-model", "-4"}, "--d-model must be in [1, 16384], got -4"},
      {"zero steps", {"train", "--steps", "0"}, "--steps must be in"},
      {"flag without its value", {"train", "--heads"}, "heads"},
      {"value that is not a number", {"train", "--d-ff", "many"}, "many"},
      {"unknown mode", {"fly"}, "unknown mode 'fly'; expected train, eval or decode"},
      {"stray argument", {"train", "abc"}, "unexpected argument 'abc'"},
      {"warmup not below steps", {"train", "--steps", "5"}, "--warmup (100) must be smaller than --steps (5)"},
      {"max-length beyond max-len", {"train", "--max-length", "70"}, "--max-length 70 needs --max-len >= 72"},
      {"on-nonfinite", {"train", "--on-nonfinite", "bad"}, "--on-nonfinite must be stop or skip, got 'bad'"},
      {"resume without a dir", {"train", "--resume"}, "--resume needs --checkpoint-dir"},
      {"stop-after without a dir", {"train", "--stop-after", "5"}, "--stop-after needs --checkpoint-dir"},
      {"negative stop-after", {"train", "--stop-after", "-1"}, "--stop-after must be in [0, 1099511627776], got -1"},
      {"dump-batch into a missing dir", {"eval", "--checkpoint", ck, "--dump-batch", path("no/such/dir/b.st")},
       path("no/such/dir/b.st")},
      {"eval without checkpoint", {"eval"}, "--checkpoint is required"},
      {"eval of a missing dir", {"eval", "--checkpoint", path("missing")}, path("missing") + " does not exist"},
      {"eval of a corrupt checkpoint", {"eval", "--checkpoint", corrupt}, corrupt + "/step-00000001.model.safetensors"},
      {"eval with zero threads", {"eval", "--checkpoint", ck, "--threads", "0"}, "--threads must be in [1, 256], got 0"},
      {"resume with another d_model",
       std::vector<std::string>{"train"} + kSmall +
           std::vector<std::string>{"--steps", "4", "--warmup", "1", "--checkpoint-dir", ck, "--resume", "--d-model",
                                    "16"},
       "was trained with model config"},
      {"decode of an out-of-vocab token", {"decode", "--checkpoint", ck, "a b zz"},
       "sequence 1, word 3: unknown symbol 'zz'; hint: the model knows 6 symbols, separated by spaces: a b c d e f"},
      {"decode of one argument holding a comma (one sequence, not two)", {"decode", "--checkpoint", ck, "a b,c"},
       "sequence 1, word 2: unknown symbol 'b,c'"},
      {"decode of an over-long sequence",
       {"decode", "--checkpoint", ck, "a b c d e f a b c d e f a b c d e f"},
       "sequence of 18 tokens exceeds the model's max_len 16"},
      {"decode of an empty sequence", {"decode", "--checkpoint", ck, "   "}, "empty input sequence"},
      {"decode with beam 0", {"decode", "--checkpoint", ck, "--beam", "0", "a b"}, "--beam must be in [1, 64], got 0"},
      {"decode without input", {"decode", "--checkpoint", ck}, "no input sequences"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Outcome r = run(c.args);
    EXPECT_EQ(r.code, 2) << r.err;
    const auto lines = lines_of(r.err);
    EXPECT_EQ(lines.size(), 1u) << r.err;
    EXPECT_TRUE(r.err.ends_with("\n")) << r.err;
    EXPECT_TRUE(r.err.starts_with("copy_task: error: ")) << r.err;
    EXPECT_FALSE(r.err.starts_with("copy_task: error: copy_task")) << "the program name is repeated: " << r.err;
    EXPECT_NE(r.err.find(c.phrase), std::string::npos) << "'" << c.phrase << "' not in: " << r.err;
  }
  // The refused resume left the checkpoint as it was.
  EXPECT_TRUE(fs::exists(ck + "/step-00000002.model.safetensors"));
  EXPECT_FALSE(fs::exists(ck + "/step-00000004.model.safetensors"));
}
