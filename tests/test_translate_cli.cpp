// The translate program end to end, run as a subprocess on a small slice of
// the number corpus: a short run learns (held-out token accuracy far above
// where it started), eval reproduces the training run's test numbers,
// translate gives one line per input from arguments, stdin or --input,
// reads every spelling of a number (capitals, commas, digits) as its corpus
// form, handles unknown words with <unk> (and refuses a line of nothing but
// unknown words), draws attention pictures, and every bad
// input gets exit code 2 and one line on stderr; resuming is exact; --init-from
// starts from a model's exact weights (also a heads_study --convert-gqa file).
//
// Labelled "slow" (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <regex>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace fs = std::filesystem;
using attograd::testing::lines_of;
using attograd::testing::ProgramOutcome;
using attograd::testing::read_text;
using attograd::testing::write_text;

namespace {

const std::string kProgram = std::string(ATTOGRAD_BIN_DIR) + "/translate";
const std::string kHeadsStudy = std::string(ATTOGRAD_BIN_DIR) + "/heads_study";

// The JSON log's evaluation records (those with an eval_loss), in order.
std::vector<nlohmann::json> eval_records(const std::string& log) {
  std::vector<nlohmann::json> out;
  for (const auto& line : lines_of(read_text(log))) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("eval_loss")) out.push_back(j);
  }
  return out;
}

// The first `n` data lines (after the header) of a corpus split.
std::string head_of(const std::string& split, size_t n) {
  const auto lines = lines_of(read_text(std::string(ATTOGRAD_SOURCE_DIR) + "/data/numbers/" + split + ".tsv"));
  std::string out;
  for (size_t i = 0; i <= n && i < lines.size(); ++i) out += lines[i] + "\n";
  return out;
}

const std::vector<std::string> kSmall = {"--d-model", "32", "--heads", "2", "--d-ff", "64", "--enc-layers", "1",
                                         "--dec-layers", "1", "--max-len", "40", "--quiet", "--samples", "0",
                                         "--threads", "1", "--batch-size", "32"};

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// "test (100 sentences): loss ..." -> "loss ..." (the metrics after the colon).
std::string metrics_after(const std::string& out, const std::string& prefix) {
  for (const auto& line : lines_of(out))
    if (line.starts_with(prefix)) return line.substr(line.find("): ") + 3);
  return "";
}

class TranslateProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kProgram)) << kProgram << " does not exist; build the translate target first";
    data_ = dir_ + "/numbers";
    fs::create_directories(data_);
    write_text(data_ + "/train.tsv", head_of("train", 3000));
    write_text(data_ + "/valid.tsv", head_of("valid", 100));
    write_text(data_ + "/test.tsv", head_of("test", 100));
  }

  ProgramOutcome run(const std::vector<std::string>& args, const std::string& input = "") {
    return attograd::testing::run_program(kProgram, args, dir_, input);
  }
  std::string train_small(const std::string& ck, const std::vector<std::string>& extra) {
    const ProgramOutcome t = run(std::vector<std::string>{"train", "--lang", "fr", "--data", data_} + kSmall +
                                 std::vector<std::string>{"--checkpoint-dir", ck} + extra);
    EXPECT_EQ(t.code, 0) << t.err;
    return t.out;
  }
  attograd::testing::TempDir tmp_{"translate"};
  std::string dir_ = tmp_.path, data_;
};

TEST_F(TranslateProgram, ShortTrainingLearnsThenEvalAndTranslateAgree) {
  const std::string ck = dir_ + "/ck", log = dir_ + "/log.jsonl";
  const std::string out = train_small(ck, {"--steps", "500", "--lr", "1e-2", "--warmup", "30", "--eval-every", "25",
                                           "--eval-size", "100", "--log", log});
  std::vector<double> acc;
  for (const auto& line : lines_of(read_text(log))) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("token_accuracy")) acc.push_back(j["token_accuracy"].get<double>());
  }
  ASSERT_GE(acc.size(), 10u) << read_text(log);
  EXPECT_LT(acc.front(), 0.45) << "step 25 should be near the start";
  EXPECT_GT(acc.back(), 0.75) << out;
  EXPECT_GT(acc.back(), acc.front() + 0.35) << out;
  EXPECT_NE(out.find("BLEU"), std::string::npos) << out;

  // eval on the test split prints the numbers the training run printed for it.
  const std::string test_metrics = metrics_after(out, "test (100 sentences)");
  ASSERT_FALSE(test_metrics.empty()) << out;
  const ProgramOutcome e = run({"eval", "--checkpoint", ck, "--data", data_, "--split", "test"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(metrics_after(e.out, "test (100 sentences, en -> fr, greedy)"), test_metrics) << e.out;

  // One line per input, whichever way the input comes; beam 1 is the greedy default.
  const std::string sentences = "seventy-one thousand\nthree hundred and twelve\n";
  const ProgramOutcome a = run({"translate", "--checkpoint", ck, "seventy-one thousand", "three hundred and twelve"});
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.err, "");
  ASSERT_EQ(lines_of(a.out).size(), 2u) << a.out;
  EXPECT_EQ(run({"translate", "--checkpoint", ck}, sentences).out, a.out);
  write_text(dir_ + "/in.txt", sentences);
  EXPECT_EQ(run({"translate", "--checkpoint", ck, "--input", dir_ + "/in.txt"}).out, a.out);
  EXPECT_EQ(run({"translate", "--checkpoint", ck, "--beam", "1"}, sentences).out, a.out);
  const ProgramOutcome b = run({"translate", "--checkpoint", ck, "--beam", "4", "--length-penalty", "1.0"}, sentences);
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(lines_of(b.out).size(), 2u);

  // Every spelling of a number, given as one argument each (commas and all),
  // translates as its corpus form does; digits are read as words.
  const std::vector<std::string> spellings = {
      "three thousand four hundred and eighty-five", "three thousand, four hundred and eighty-five",
      "Three thousand, four hundred and eighty-five", "THREE THOUSAND, FOUR HUNDRED AND EIGHTY-FIVE",
      "three  thousand four hundred and eighty-five ", "three thousand four hundred and eighty - five.",
      "3485", "3,485"};
  const ProgramOutcome n = run(std::vector<std::string>{"translate", "--checkpoint", ck} + spellings);
  ASSERT_EQ(n.code, 0) << n.err;
  EXPECT_EQ(n.err, "");
  const auto translations = lines_of(n.out);
  ASSERT_EQ(translations.size(), spellings.size()) << n.out;
  for (size_t i = 1; i < spellings.size(); ++i) EXPECT_EQ(translations[i], translations[0]) << spellings[i];
  // eval normalises its sources the same way: a split written in capitals
  // with commas scores as the split itself.
  std::string shouted;
  for (const auto& line : lines_of(read_text(data_ + "/test.tsv"))) {
    std::string l = line;
    const size_t src = l.find('\t'), src_end = l.find('\t', src + 1);
    if (l[0] != '#') {
      for (size_t k = src; k < src_end; ++k) l[k] = static_cast<char>(std::toupper(static_cast<unsigned char>(l[k])));
      l.insert(src_end, ".");
      l.replace(l.find(" THOUSAND ") == std::string::npos ? src_end : l.find(" THOUSAND ") + 9, 0, ",");
    }
    shouted += l + "\n";
  }
  write_text(dir_ + "/shouted.tsv", shouted);
  const ProgramOutcome sh = run({"eval", "--checkpoint", ck, "--split", dir_ + "/shouted.tsv"});
  ASSERT_EQ(sh.code, 0) << sh.err;
  EXPECT_EQ(metrics_after(sh.out, dir_ + "/shouted.tsv (100 sentences, en -> fr, greedy)"), test_metrics) << sh.out;

  // Unknown words become <unk>, with a warning, and still get a translation.
  const ProgramOutcome u = run({"translate", "--checkpoint", ck, "seventy-one zillion"});
  ASSERT_EQ(u.code, 0) << u.err;
  EXPECT_EQ(lines_of(u.out).size(), 1u);
  EXPECT_NE(u.err.find("line 1: unknown word \"zillion\" read as <unk>"), std::string::npos) << u.err;

  // Attention pictures: (1 encoder self + 1 decoder self + 1 cross) x 2 heads, and an index.
  const std::string pics = dir_ + "/attention";
  const ProgramOutcome p = run({"translate", "--checkpoint", ck, "--attention-out", pics, "seventy-one thousand"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.out, lines_of(a.out)[0] + "\n");
  const std::string index = read_text(pics + "/index.html");
  for (const std::string kind : {"enc-self", "dec-self", "cross"})
    for (int h = 0; h < 2; ++h) {
      const std::string file = kind + "-L0-H" + std::to_string(h) + ".svg";
      const std::string svg = read_text(pics + "/" + file);
      ASSERT_TRUE(svg.starts_with("<svg")) << file;
      EXPECT_NE(index.find("src=\"" + file + "\""), std::string::npos) << file;
      EXPECT_NE(svg.find(kind == "dec-self" ? ">&lt;bos&gt;</text>" : ">seventy</text>"), std::string::npos) << file;
    }
  EXPECT_NE(read_text(pics + "/cross-L0-H0.svg").find(">&lt;eos&gt;</text>"), std::string::npos);
}

TEST_F(TranslateProgram, ResumingIsExact) {
  // 12 steps straight vs 6 + resume to 12, with dropout: the same final model
  // file, byte for byte but for its run id. (The schedule must not depend on --steps, as cosine does.)
  const std::vector<std::string> flags = {"--dropout", "0.1", "--schedule", "warmup", "--warmup", "3",
                                          "--eval-every", "0", "--eval-size", "8"};
  const std::string whole = dir_ + "/whole", split = dir_ + "/split";
  train_small(whole, flags + std::vector<std::string>{"--steps", "12"});
  train_small(split, flags + std::vector<std::string>{"--steps", "6"});
  train_small(split, flags + std::vector<std::string>{"--steps", "12", "--resume"});
  const std::string a = attograd::testing::without_run_id(whole + "/step-00000012.model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == attograd::testing::without_run_id(split + "/step-00000012.model.safetensors"));
  EXPECT_NE(a, attograd::testing::without_run_id(split + "/step-00000006.model.safetensors"));
}

TEST_F(TranslateProgram, InitFromStartsFromTheModelsWeightsExactly) {
  const std::vector<std::string> flags = {"--warmup", "2", "--eval-every", "0", "--eval-size", "40"};
  const std::string src = dir_ + "/src", src_log = dir_ + "/src.jsonl";
  train_small(src, flags + std::vector<std::string>{"--steps", "30", "--log", src_log});
  const auto before = eval_records(src_log);
  ASSERT_EQ(before.size(), 1u);

  // Step 0 of the new run evaluates the loaded weights: the source's numbers to the last bit.
  const std::string dst = dir_ + "/dst", dst_log = dir_ + "/dst.jsonl";
  train_small(dst, flags + std::vector<std::string>{"--steps", "4", "--init-from", src, "--log", dst_log});
  const auto after = eval_records(dst_log);
  ASSERT_EQ(after.size(), 2u) << read_text(dst_log);
  EXPECT_EQ(after[0]["step"], 0);
  for (const char* k : {"eval_loss", "token_accuracy", "exact_match", "bleu"}) EXPECT_EQ(after[0][k], before[0][k]) << k;
  EXPECT_EQ(after[1]["step"], 4);  // a fresh step count: 4 steps, not 30 + 4
  EXPECT_TRUE(fs::exists(dst + "/step-00000004.model.safetensors"));

  // Another model shape: exit code 2, one line naming the field.
  const ProgramOutcome bad = run(std::vector<std::string>{"train", "--lang", "fr", "--data", data_} + kSmall +
                                 std::vector<std::string>{"--heads", "1", "--steps", "2", "--warmup", "0", "--init-from", src});
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_EQ(lines_of(bad.err).size(), 1u) << bad.err;
  EXPECT_NE(bad.err.find("heads: 2 in the checkpoint, 1 from the flags"), std::string::npos) << bad.err;
  const ProgramOutcome both = run({"train", "--data", data_, "--checkpoint-dir", dst, "--resume", "--init-from", src});
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("--init-from and --resume exclude each other"), std::string::npos) << both.err;

  // A grouped-query model converted by heads_study loads into a run with its K/V heads, and only there.
  const std::string gqa = dir_ + "/gqa1.model.safetensors";
  const ProgramOutcome c = attograd::testing::run_program(
      kHeadsStudy, {"--convert-gqa", src, "--kv-heads", "1", "--to", gqa}, dir_);
  ASSERT_EQ(c.code, 0) << c.err;
  const std::string up_log = dir_ + "/up.jsonl";
  train_small(dir_ + "/up", flags + std::vector<std::string>{"--steps", "3", "--kv-heads", "1", "--init-from", gqa,
                                                             "--log", up_log});
  EXPECT_EQ(eval_records(up_log).front()["step"], 0);
  const ProgramOutcome mha = run(std::vector<std::string>{"train", "--lang", "fr", "--data", data_} + kSmall +
                                 std::vector<std::string>{"--steps", "2", "--warmup", "0", "--init-from", gqa});
  EXPECT_EQ(mha.code, 2);
  EXPECT_NE(mha.err.find("kv_heads: 1 in the checkpoint, 2 from the flags"), std::string::npos) << mha.err;
}

TEST_F(TranslateProgram, BadInputGetsOneLineAndExitCode2) {
  const std::string ck = dir_ + "/ck";
  train_small(ck, {"--steps", "2", "--warmup", "1", "--eval-size", "4"});
  const std::string bad_data = dir_ + "/bad";
  fs::create_directories(bad_data);
  write_text(bad_data + "/train.tsv", "#number\ten\tfr\n1\tone\n");
  fs::create_directories(bad_data + "/d/train.tsv");
  write_text(dir_ + "/empty.txt", "");
  struct Case {
    std::string name;
    std::vector<std::string> args;
    std::string input, phrase;
  };
  const std::vector<Case> cases = {
      {"unknown mode", {"transl"}, "", "unknown mode 'transl'; expected train, eval, translate, prepare or score"},
      {"unknown language", {"train", "--lang", "it"}, "", "unknown target language 'it'; expected fr, de or es"},
      {"missing corpus", {"train", "--data", dir_ + "/nowhere"}, "", "train.tsv does not exist"},
      {"malformed corpus", {"train", "--data", bad_data}, "", "train.tsv:2: expected 3 tab-separated fields, found 2"},
      {"max-len too small", {"train", "--data", data_, "--max-len", "10"}, "", "need --max-len >="},
      {"no checkpoint flag", {"translate", "one"}, "", "--checkpoint is required"},
      {"missing checkpoint", {"translate", "--checkpoint", dir_ + "/none", "one"}, "", "none"},
      {"empty stdin", {"translate", "--checkpoint", ck}, "", "no input; hint"},
      {"only blank lines", {"translate", "--checkpoint", ck}, "\n  \n", "no sentence to translate: 2 blank lines"},
      {"blank argument", {"translate", "--checkpoint", ck, "  "}, "", "no sentence to translate: 1 blank line"},
      {"only punctuation", {"translate", "--checkpoint", ck, " , . "}, "", "input line 1 (\" , . \") has no words"},
      {"only unknown words", {"translate", "--checkpoint", ck, "zillion"}, "",
       "input line 1 (\"zillion\") has no word the model knows; it reads whole numbers from 0 to 999,999 in English "
       "words or digits"},
      {"digits beyond the corpus", {"translate", "--checkpoint", ck}, "one\n3,485,000\n",
       "input line 2 (\"3,485,000\") has no word the model knows"},
      {"empty --input", {"translate", "--checkpoint", ck, "--input", dir_ + "/empty.txt"}, "", "is empty"},
      {"missing --input", {"translate", "--checkpoint", ck, "--input", dir_ + "/nope.txt"}, "", "cannot open"},
      {"--input a directory", {"translate", "--checkpoint", ck, "--input", dir_}, "", "is a directory"},
      {"--input a device", {"translate", "--checkpoint", ck, "--input", "/dev/zero"}, "", "is a character device"},
      {"--split a device", {"eval", "--checkpoint", ck, "--split", "/dev/zero"}, "", "is a character device"},
      {"--data a directory of directories", {"train", "--data", bad_data + "/d"}, "", "is a directory"},
      {"arguments and --input", {"translate", "--checkpoint", ck, "--input", dir_ + "/empty.txt", "one"}, "", "not both"},
      {"beam 0", {"translate", "--checkpoint", ck, "--beam", "0", "one"}, "", "--beam must be in [1, 64], got 0"},
      {"negative length penalty", {"translate", "--checkpoint", ck, "--length-penalty", "-1", "one"}, "", "--length-penalty"},
      {"max-len beyond the model", {"translate", "--checkpoint", ck, "--max-len", "500", "one"}, "", "exceeds what the model allows"},
      {"attention for two sentences", {"translate", "--checkpoint", ck, "--attention-out", dir_ + "/p", "one", "two"}, "",
       "--attention-out draws one sentence, got 2"},
      {"unknown split", {"eval", "--checkpoint", ck, "--data", data_, "--split", "dev"}, "", "dev.tsv does not exist"},
      {"positional argument to eval", {"eval", "--checkpoint", ck, "one"}, "", "unexpected argument 'one'"},
      {"unknown flag", {"translate", "--bogus"}, "", "bogus"},
  };
  for (const Case& c : cases) {
    const ProgramOutcome r = run(c.args, c.input);
    EXPECT_EQ(r.code, 2) << c.name << "\nstdout: " << r.out << "\nstderr: " << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << c.name << ": " << r.err;
    EXPECT_TRUE(r.err.starts_with("translate: error: ")) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(c.phrase), std::string::npos) << c.name << ": " << r.err;
    EXPECT_EQ(r.out, "") << c.name;
  }
  // A sentence longer than the model accepts (40 positions).
  std::string long_sentence;
  for (int i = 0; i < 50; ++i) long_sentence += "one ";
  const ProgramOutcome r = run({"translate", "--checkpoint", ck, long_sentence});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("input line 1 has 50 tokens; the model accepts at most 38"), std::string::npos) << r.err;
}

// Input as it comes from files and terminals: blank lines keep their place,
// and what the user typed is shown escaped in messages, never raw.
TEST_F(TranslateProgram, BlankLinesAndControlCharactersInInput) {
  const std::string ck = dir_ + "/ck";
  train_small(ck, {"--steps", "2", "--warmup", "1", "--eval-size", "4"});
  const ProgramOutcome one = run({"translate", "--checkpoint", ck, "one"});
  const ProgramOutcome two = run({"translate", "--checkpoint", ck, "two"});
  ASSERT_EQ(one.code, 0) << one.err;
  // A blank line, inside or at the end, is an empty output line: output line N is input line N.
  const std::string input = "one\n\n  \ntwo\r\n\n";
  write_text(dir_ + "/in.txt", input);
  for (const ProgramOutcome& r : {run({"translate", "--checkpoint", ck}, input),
                                  run({"translate", "--checkpoint", ck, "--input", dir_ + "/in.txt"})}) {
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_EQ(r.out, one.out + "\n\n" + two.out + "\n");
  }
  // Control characters, a bidi override and a NUL: escaped in the warning and
  // the error, which name the words as they are and are not cut at the NUL.
  const ProgramOutcome w = run({"translate", "--checkpoint", ck}, "one \x01two \x1bhundred \x7f \xE2\x80\xAEzz\n");
  ASSERT_EQ(w.code, 0) << w.err;
  EXPECT_EQ(w.err, "translate: warning: line 1: unknown words \"\\x01two\", \"\\x1bhundred\", \"\\x7f\", "
                   "\"\\u202ezz\" read as <unk>\n");
  const ProgramOutcome n = run({"translate", "--checkpoint", ck}, std::string("one\0two\x1b[31m\n", 13));
  attograd::testing::expect_one_line_error(n, "translate", "input line 1 (\"one\\x00two\\x1b[31m\") has no word");
  EXPECT_NE(n.err.find("or 3485\n"), std::string::npos) << n.err;  // the whole message
  for (const ProgramOutcome* r : {&w, &n})
    for (const char raw : {'\x01', '\x1b', '\x7f', '\0'}) EXPECT_EQ(r->err.find(raw), std::string::npos) << r->err;
  EXPECT_EQ(w.err.find("\xE2\x80\xAE"), std::string::npos);
}

}  // namespace
