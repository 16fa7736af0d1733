// The language model's tokenizers (attograd/data/lm_tokenizer.h, attograd/data/sentencepiece.h).
// SentencePiece ids are checked against python3-sentencepiece's on the same
// model files (tools/make_sentencepiece_fixtures.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <attograd/autograd/error.h>
#include <attograd/data/lm_tokenizer.h>
#include <attograd/data/sentencepiece.h>
#include <attograd/version.h>

#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

const std::string kFixtures = std::string(ATTOGRAD_SOURCE_DIR) + "/tests/fixtures/sentencepiece/";

std::vector<int32_t> as_ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

}  // namespace

TEST(CharLMTokenizer, CodePointsByFrequencyUnknownsAndRoundTrip) {
  const std::string text = "süß, süß\n";
  CharLMTokenizer tok = CharLMTokenizer::train(text);
  // s ü ß , ' ' \n: s, ü and ß twice (byte order among equals), then the rest once.
  EXPECT_EQ(tok.symbols(), (std::vector<std::string>{"s", "ß", "ü", "\n", " ", ","}));
  EXPECT_EQ(tok.vocab_size(), 7);
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 2, 6, 5, 1, 3, 2, 4}));
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.encode("sx"), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(tok.decode(tok.encode("sx")), "s\xEF\xBF\xBD");
  CharLMTokenizer top = CharLMTokenizer::train(text, 3);
  EXPECT_EQ(top.symbols(), (std::vector<std::string>{"s", "ß"}));
}

TEST(CharLMTokenizer, InvalidUtf8NamesTheByteAndBadSizesAreRefused) {
  expect_error<ValueError>([] { CharLMTokenizer::train("ab\xC3(z"); }, {"at byte 3"});
  CharLMTokenizer tok = CharLMTokenizer::train("abc");
  expect_error<ValueError>([&] { tok.encode("a\xFF"); }, {"invalid UTF-8 lead byte 0xFF at byte 1"});
  expect_error<ValueError>([] { CharLMTokenizer::train(""); }, {"the text is empty"});
  expect_error<ValueError>([] { CharLMTokenizer::train("abc", 9); }, {"3 distinct characters", "2..4"});
  expect_error<IndexError>([&] { tok.decode(std::vector<int32_t>{4}); }, {"id 4 is outside"});
}

TEST(CharLMTokenizer, SavesAndLoadsThroughItsDirectory) {
  TempDir dir("lmtok");
  const std::string text = "line one\n\ttab \"quoted\" é\n";
  auto tok = train_lm_tokenizer(text, {.kind = "char"});
  tok->save(dir.path);
  auto back = load_lm_tokenizer(dir.path);
  EXPECT_EQ(back->kind(), "char");
  EXPECT_EQ(back->vocab_size(), tok->vocab_size());
  EXPECT_EQ(back->encode(text), tok->encode(text));
  expect_error<IOError>([&] { load_lm_tokenizer(dir / "missing"); }, {"tokenizer.json"});
  write_text(dir / "tokenizer.json", "{\"kind\": \"char\", \"symbols\": [\"ab\"]}");
  expect_error<IOError>([&] { load_lm_tokenizer(dir.path); }, {"not one character"});
}

// The SentencePiece tests skip in a build without it (sentencepiece_missing.cpp;
// test_build_features.cpp checks its error there).
class SentencePieceFixture : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { if (!build_features().sentencepiece) GTEST_SKIP() << "built without SentencePiece (ATTOGRAD_SENTENCEPIECE=OFF)"; }
};

TEST_P(SentencePieceFixture, IdsEqualPythonSentencePieceOnTheSameModel) {
  const std::string kind = GetParam();
  const auto expected = nlohmann::json::parse(read_text(kFixtures + "expected.json"));
  SentencePieceTokenizer sp = SentencePieceTokenizer::load(kFixtures + kind + ".model", kind);
  EXPECT_EQ(sp.vocab_size(), expected.at("vocab_size").get<int64_t>());
  const auto& probes = expected.at("probes");
  for (size_t i = 0; i < probes.size(); ++i) {
    const std::string text = probes[i].get<std::string>();
    const std::vector<int32_t> ids = sp.encode(text);
    EXPECT_EQ(ids, as_ids(expected.at(kind)[i])) << "probe " << i;
    EXPECT_EQ(sp.decode(ids), expected.at(kind + "_decoded")[i].get<std::string>()) << "probe " << i;
  }
}

TEST_P(SentencePieceFixture, TrainingHereGivesPythonsModel) {
  const std::string kind = GetParam();
  const auto expected = nlohmann::json::parse(read_text(kFixtures + "expected.json"));
  auto sp = train_lm_tokenizer(read_text(kFixtures + "train.txt"), {.kind = kind, .vocab_size = 300});
  EXPECT_EQ(sp->kind(), kind);
  const auto& probes = expected.at("probes");
  for (size_t i = 0; i < probes.size(); ++i)
    EXPECT_EQ(sp->encode(probes[i].get<std::string>()), as_ids(expected.at(kind)[i])) << "probe " << i;
  TempDir dir("spm");
  sp->save(dir.path);
  auto back = load_lm_tokenizer(dir.path);
  EXPECT_EQ(back->kind(), kind);
  const std::string text = "  two spaces,\nthen a new line\n\n";
  EXPECT_EQ(back->encode(text), sp->encode(text));
  EXPECT_EQ(back->decode(back->encode(text)), text);
}

INSTANTIATE_TEST_SUITE_P(Kinds, SentencePieceFixture, ::testing::Values("bpe", "unigram"));

TEST(SentencePieceTokenizer, ChunkedEncodingOfALongTextEqualsLineByLine) {
  if (!build_features().sentencepiece) GTEST_SKIP() << "built without SentencePiece (ATTOGRAD_SENTENCEPIECE=OFF)";
  SentencePieceTokenizer sp = SentencePieceTokenizer::load(kFixtures + "bpe.model", "bpe");
  const std::string train = read_text(kFixtures + "train.txt");
  std::string big;
  while (big.size() < 200'000) big += train;
  std::vector<int32_t> by_line;
  for (size_t pos = 0; pos < big.size();) {
    const size_t end = big.find('\n', pos) + 1;
    const auto ids = sp.encode(std::string_view(big).substr(pos, end - pos));
    by_line.insert(by_line.end(), ids.begin(), ids.end());
    pos = end;
  }
  EXPECT_EQ(sp.encode(big), by_line);
}

TEST(SentencePieceTokenizer, BadInputIsAClearError) {
  if (!build_features().sentencepiece) GTEST_SKIP() << "built without SentencePiece (ATTOGRAD_SENTENCEPIECE=OFF)";
  expect_error<ValueError>([] { train_lm_tokenizer("abc abc\n", {.kind = "bpe", .vocab_size = 5000}); },
                           {"could not train a bpe vocabulary of 5000 pieces", "--vocab-size must hold"});
  expect_error<ValueError>([] { train_lm_tokenizer("\n\n", {.kind = "unigram", .vocab_size = 100}); }, {"empty"});
  expect_error<ValueError>([] { train_lm_tokenizer("text", {.kind = "wordpiece"}); }, {"unknown tokenizer 'wordpiece'"});
  expect_error<ValueError>([] { train_lm_tokenizer("a\xC0z", {.kind = "bpe", .vocab_size = 10}); }, {"at byte 1"});
}

// SentencePiece's trainer skips a line over 4192 bytes; such lines are fed to it
// in pieces, so a text of long lines trains, and learns from every line.
TEST(SentencePieceTokenizer, LinesOverTheTrainersLimitAreLearnedNotSkipped) {
  if (!build_features().sentencepiece) GTEST_SKIP() << "built without SentencePiece (ATTOGRAD_SENTENCEPIECE=OFF)";
  std::string one_line;  // about 13 kB, no line break
  for (int i = 0; one_line.size() < 13'000; ++i) one_line += i % 3 ? "quux flob " : "zyzzyva ";
  std::string no_spaces;  // 9 kB of two-byte characters
  while (no_spaces.size() < 9'000) no_spaces += "\xC3\xA9\xC3\xBC";
  const std::string text = "a short line\n" + one_line + "\n" + no_spaces + "\n";
  for (const char* kind : {"bpe", "unigram"}) {
    SCOPED_TRACE(kind);
    const auto sp = train_lm_tokenizer(text, {.kind = kind, .vocab_size = 30});
    EXPECT_EQ(sp->decode(sp->encode(text)), text);
    // Pieces seen only in the long lines: had they been skipped, these would be <unk> (id 0).
    for (const char* word : {"zyzzyva", "\xC3\xA9"})
      for (const int32_t id : sp->encode(word)) EXPECT_NE(id, 0) << word;
    const auto ids = sp->encode(" quux flob");
    EXPECT_LT(ids.size(), std::string(" quux flob").size()) << "no piece merged from the long line";
  }
  {  // nothing but one long line
    const auto sp = train_lm_tokenizer(one_line, {.kind = "bpe", .vocab_size = 30});
    EXPECT_EQ(sp->decode(sp->encode(one_line)), one_line);
  }
}

TEST(SentencePieceTokenizer, ACorruptModelFileIsNamed) {
  if (!build_features().sentencepiece) GTEST_SKIP() << "built without SentencePiece (ATTOGRAD_SENTENCEPIECE=OFF)";
  TempDir dir("spm");
  train_lm_tokenizer(read_text(kFixtures + "train.txt"), {.kind = "bpe", .vocab_size = 300})->save(dir.path);
  write_text(dir / "tokenizer.model", "not a protobuf at all");
  const std::string msg = error_message<IOError>([&] { load_lm_tokenizer(dir.path); });
  EXPECT_TRUE(contains(msg, dir / "tokenizer.model")) << msg;
  EXPECT_FALSE(contains(msg, "tokenizer.json")) << msg;
  EXPECT_TRUE(contains(msg, "not a SentencePiece model")) << msg;
  std::filesystem::remove(dir / "tokenizer.model");
  expect_error<IOError>([&] { load_lm_tokenizer(dir.path); }, {dir / "tokenizer.model"});
}
