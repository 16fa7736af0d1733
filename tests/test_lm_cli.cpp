// The lm program end to end, run as a subprocess: a tiny GPT trained on a few
// KB for a few steps, deterministic seeded samples, exact resume, eval, and
// one clear line with exit code 2 for every kind of bad input.
#include <sched.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <attograd/version.h>

#include "test_util.h"

using namespace attograd::testing;

namespace {

const std::string kProgram = std::string(ATTOGRAD_BIN_DIR) + "/lm";

// A few KB of varied text.
std::string small_text() {
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "away", "from", "home"};
  std::string text;
  for (int i = 0; i < 600; ++i) {
    text += words[(i * 7 + i / 13) % 13];
    text += i % 11 == 10 ? ".\n" : " ";
  }
  return text;
}

// A tiny model and run; `extra` adds or overrides flags.
std::vector<std::string> tiny_train(const std::string& data, std::vector<std::string> extra) {
  std::vector<std::string> args = {"train", "--text", data, "--context", "16", "--d-model", "16", "--heads", "2",
                                   "--d-ff", "32", "--layers", "1", "--batch-size", "4", "--steps", "6",
                                   "--warmup", "1", "--eval-every", "3", "--eval-size", "4", "--quiet", "--samples", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<double> logged_losses(const std::string& path) {
  std::vector<double> losses;
  for (const std::string& line : lines_of(read_text(path))) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

class LMProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kProgram)) << kProgram << " does not exist; build the lm target first";
    write_text(dir / "text.txt", small_text());
  }
  ProgramOutcome run(const std::vector<std::string>& args) { return run_program(kProgram, args, dir.path); }
  TempDir dir{"lm_cli"};
};

}  // namespace

TEST_F(LMProgram, TrainsSamplesDeterministicallyAndEvaluates) {
  const std::string ck = dir / "ck";
  for (const char* tokenizer : {"char", "bpe"}) {
    SCOPED_TRACE(tokenizer);
    if (std::string(tokenizer) == "bpe" && !attograd::build_features().sentencepiece) {  // its clear error instead
      expect_one_line_error(run(tiny_train(dir / "text.txt", {"--tokenizer", "bpe", "--vocab-size", "40"})), "lm",
                            "apt install libsentencepiece-dev");
      continue;
    }
    std::filesystem::remove_all(ck);
    std::vector<std::string> extra = {"--checkpoint-dir", ck, "--tokenizer", tokenizer};
    if (std::string(tokenizer) == "bpe") extra.insert(extra.end(), {"--vocab-size", "40"});
    const ProgramOutcome t = run(tiny_train(dir / "text.txt", extra));
    ASSERT_EQ(t.code, 0) << t.err;
    EXPECT_TRUE(contains(t.out, "unigram baseline")) << t.out;
    EXPECT_TRUE(contains(t.out, "perplexity")) << t.out;
    EXPECT_TRUE(std::filesystem::exists(ck + "/tokenizer.json"));
    const std::vector<std::string> sample = {"sample", "--checkpoint", ck, "--prompt", "the cat", "--max-len", "20",
                                             "--seed", "7", "--top-k", "5", "--top-p", "0.9"};
    const ProgramOutcome a = run(sample), b = run(sample);
    ASSERT_EQ(a.code, 0) << a.err;
    EXPECT_TRUE(a.out.starts_with("the cat")) << a.out;
    EXPECT_GT(a.out.size(), std::string("the cat\n").size());
    EXPECT_EQ(a.out, b.out);
    const ProgramOutcome e = run({"eval", "--checkpoint", ck});
    ASSERT_EQ(e.code, 0) << e.err;
    EXPECT_TRUE(contains(e.out, "perplexity")) << e.out;
    EXPECT_TRUE(contains(e.out, "bits/char")) << e.out;
  }
}

TEST_F(LMProgram, ResumeContinuesExactly) {
  const ProgramOutcome whole = run(tiny_train(dir / "text.txt", {"--checkpoint-dir", dir / "a", "--log", dir / "a.jsonl",
                                                                 "--log-every", "1"}));
  ASSERT_EQ(whole.code, 0) << whole.err;
  const std::vector<std::string> b = {"--checkpoint-dir", dir / "b", "--log", dir / "b.jsonl", "--log-every", "1"};
  auto half = b, rest = b;
  half.insert(half.end(), {"--stop-after", "2"});
  rest.push_back("--resume");
  ASSERT_EQ(run(tiny_train(dir / "text.txt", half)).code, 0);
  const ProgramOutcome resumed = run(tiny_train(dir / "text.txt", rest));
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  const auto straight = logged_losses(dir / "a.jsonl"), stopped_and_resumed = logged_losses(dir / "b.jsonl");
  ASSERT_EQ(straight.size(), 6u);
  EXPECT_EQ(straight, stopped_and_resumed);
}

TEST_F(LMProgram, BadInputIsOneLineAndExitCode2) {
  write_text(dir / "empty.txt", "");
  expect_one_line_error(run(tiny_train(dir / "empty.txt", {})), "lm", "the text is empty");
  write_text(dir / "binary.txt", std::string("ok\x00\xff\xfe text", 10));
  expect_one_line_error(run(tiny_train(dir / "binary.txt", {})), "lm", "invalid UTF-8 lead byte 0xFF at byte 3");
  expect_one_line_error(run(tiny_train(dir / "missing.txt", {})), "lm", "missing.txt");
  expect_one_line_error(run(tiny_train(dir / "text.txt", {"--vocab-size", "500"})), "lm", "distinct characters");
  if (attograd::build_features().sentencepiece)
    expect_one_line_error(run(tiny_train(dir / "text.txt", {"--tokenizer", "bpe", "--vocab-size", "5000"})), "lm",
                          "--vocab-size must hold");
  write_text(dir / "short.txt", "tiny text\n");
  expect_one_line_error(run(tiny_train(dir / "short.txt", {})), "lm", "shorter --context");
  const std::string ck = dir / "ck";
  ASSERT_EQ(run(tiny_train(dir / "text.txt", {"--checkpoint-dir", ck, "--steps", "2", "--eval-every", "0"})).code, 0);
  expect_one_line_error(run({"sample", "--checkpoint", ck, "--prompt", std::string(20, 'a')}), "lm",
                        "the prompt has 20 tokens, but the model's context is 16");
  expect_one_line_error(run({"sample", "--checkpoint", ck, "--top-p", "0"}), "lm", "--top-p");
  expect_one_line_error(run({"sample"}), "lm", "--checkpoint is required");
  expect_one_line_error(run({"generate"}), "lm", "unknown mode 'generate'");
}

// lm trains through the shared loop, so its views of the first step and its
// label smoothing work as they do for copy_task and translate.
TEST_F(LMProgram, TheSharedLoopsFlagsWork) {
  const ProgramOutcome v = run(tiny_train(dir / "text.txt", {"--steps", "2", "--graph-out", dir / "graph.dot",
                                                             "--trace-backward=" + std::string(dir / "trace.jsonl"),
                                                             "--log", dir / "plain.jsonl", "--log-every", "1"}));
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_TRUE(contains(read_text(dir / "graph.dot"), "digraph"));
  const auto trace = lines_of(read_text(dir / "trace.jsonl"));
  ASSERT_FALSE(trace.empty());
  EXPECT_TRUE(nlohmann::json::parse(trace.front()).is_object());
  const ProgramOutcome s = run(tiny_train(dir / "text.txt", {"--steps", "2", "--label-smoothing", "0.3", "--log",
                                                             dir / "smooth.jsonl", "--log-every", "1"}));
  ASSERT_EQ(s.code, 0) << s.err;
  const auto plain = logged_losses(dir / "plain.jsonl"), smooth = logged_losses(dir / "smooth.jsonl");
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(smooth.size(), 2u);
  EXPECT_NE(plain[0], smooth[0]) << "--label-smoothing did not change the loss";
}

TEST_F(LMProgram, AttentionOutDrawsEveryLayerAndHead) {
  const std::string ck = dir / "ck", pics = dir / "pics";
  ASSERT_EQ(run(tiny_train(dir / "text.txt", {"--checkpoint-dir", ck, "--steps", "2", "--layers", "2"})).code, 0);
  const ProgramOutcome p = run({"sample", "--checkpoint", ck, "--prompt", "the cat", "--max-len", "5", "--seed", "3",
                                "--attention-out", pics});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_TRUE(contains(p.err, "wrote 4 attention heatmaps")) << p.err;
  const std::string index = read_text(pics + "/index.html");
  EXPECT_TRUE(index.starts_with("<!DOCTYPE html>"));
  for (int layer = 0; layer < 2; ++layer)
    for (int h = 0; h < 2; ++h) {
      const std::string file = "causal-self-L" + std::to_string(layer) + "-H" + std::to_string(h) + ".svg";
      const std::string svg = read_text(pics + "/" + file);
      ASSERT_TRUE(svg.starts_with("<svg")) << file;
      EXPECT_TRUE(svg.ends_with("</svg>\n")) << file;
      EXPECT_TRUE(contains(index, "src=\"" + file + "\"")) << file;
      EXPECT_TRUE(contains(svg, ">c</text>")) << file;  // a token of the prompt labels a row and a column
      EXPECT_TRUE(contains(svg, "causal self-attention")) << file;
    }
  // 7 prompt + 5 sampled tokens: a 12 x 12 grid.
  const std::string svg = read_text(pics + "/causal-self-L0-H0.svg");
  size_t cells = 0;
  for (size_t at = svg.find("<rect x="); at != std::string::npos; at = svg.find("<rect x=", at + 1)) ++cells;
  EXPECT_EQ(cells, 12u * 12u + 1u);  // the cells and the frame
}

// --threads defaults to the cores the process may use, the header says how
// many, and the losses are those of one thread, bit for bit.
TEST_F(LMProgram, DefaultsToTheUsableCoresWithTheSameLosses) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cores = CPU_COUNT(&set);
  const auto logged = [&](const std::string& log, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--log", log, "--log-every", "1", "--steps", "3"});
    return run(tiny_train(dir / "text.txt", extra));
  };
  const ProgramOutcome d = logged(dir / "default.jsonl", {});
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_TRUE(contains(d.out, "| " + std::to_string(cores) + " thread(s)")) << d.out;
  ASSERT_EQ(logged(dir / "one.jsonl", {"--threads", "1"}).code, 0);
  const auto a = logged_losses(dir / "default.jsonl"), b = logged_losses(dir / "one.jsonl");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a, b);
}

// --text is read with a bound: a device that never ends and a directory are refused at once.
TEST_F(LMProgram, InputsThatAreNotFilesAreRefused) {
  expect_one_line_error(run(tiny_train("/dev/zero", {})), "lm", "'/dev/zero' is a character device");
  expect_one_line_error(run(tiny_train("/dev/urandom", {})), "lm", "'/dev/urandom' is a character device");
  expect_one_line_error(run(tiny_train(dir.path, {})), "lm", "is a directory");
}

// The checkpoint records the text's absolute path: eval from another directory
// finds a text given as a relative path, and says what to do once it is gone.
TEST_F(LMProgram, EvalFindsTheTrainingTextFromAnotherDirectory) {
  const std::string ck = dir / "ck";
  const std::string train = "cd " + shell_quote(dir.path) + " && exec " + shell_quote(kProgram) + " \"$@\"";
  std::vector<std::string> args = {"-c", train, "lm"};
  for (const std::string& a : tiny_train("text.txt", {"--checkpoint-dir", ck, "--steps", "2", "--eval-every", "0"}))
    args.push_back(a);
  const ProgramOutcome t = run_program("/bin/sh", args, dir.path);
  ASSERT_EQ(t.code, 0) << t.err;
  const ProgramOutcome e = run({"eval", "--checkpoint", ck});  // from the test's own directory
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_TRUE(contains(e.out, "held-out (" + (dir / "text.txt") + ",")) << e.out;
  std::filesystem::rename(dir / "text.txt", dir / "moved.txt");
  expect_one_line_error(run({"eval", "--checkpoint", ck}), "lm",
                        "the checkpoint's training text " + (dir / "text.txt") + " is missing; hint: pass --text FILE");
  const ProgramOutcome moved = run({"eval", "--checkpoint", ck, "--text", dir / "moved.txt"});
  EXPECT_EQ(moved.code, 0) << moved.err;
}
