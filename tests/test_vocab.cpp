// Vocab (build, encode/decode, save/load and corrupt files) and tokenizers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <attograd/autograd/error.h>
#include <attograd/data/tokenizer.h>
#include <attograd/data/vocab.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_error;
namespace fs = std::filesystem;

namespace {

using Strings = std::vector<std::string>;
using Ids = std::vector<int64_t>;

// A file under the test temp dir with the given bytes; removed on destruction.
struct TempFile {
  explicit TempFile(const std::string& name, const std::string& bytes = "")
      : path((fs::path(::testing::TempDir()) / ("attograd_vocab_" + name)).string()) {
    if (!bytes.empty()) std::ofstream(path, std::ios::binary) << bytes;
  }
  ~TempFile() { fs::remove(path); }
  std::string path;
};

}  // namespace

// ---- vocab ------------------------------------------------------------------

TEST(Vocab, SpecialsHaveFixedIds) {
  Vocab v;
  EXPECT_EQ(v.size(), 4);
  EXPECT_EQ(v.id("<pad>"), kPadId);
  EXPECT_EQ(v.id("<bos>"), kBosId);
  EXPECT_EQ(v.id("<eos>"), kEosId);
  EXPECT_EQ(v.id("<unk>"), kUnkId);
  EXPECT_EQ((Ids{kPadId, kBosId, kEosId, kUnkId}), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(v.tokens(), (Strings{"<pad>", "<bos>", "<eos>", "<unk>"}));
}

TEST(Vocab, BuildWithMinFrequency) {
  std::vector<Strings> corpus = {{"the", "cat", "sat"}, {"the", "dog", "sat"}, {"the", "cat", "<unk>", "ran"}};
  Vocab v1 = Vocab::build(corpus);
  // the:3, cat:2, sat:2, dog:1, ran:1; ties in byte order; "<unk>" keeps id 3.
  EXPECT_EQ(v1.tokens(), (Strings{"<pad>", "<bos>", "<eos>", "<unk>", "the", "cat", "sat", "dog", "ran"}));
  Vocab v2 = Vocab::build(corpus, 2);
  EXPECT_EQ(v2.tokens(), (Strings{"<pad>", "<bos>", "<eos>", "<unk>", "the", "cat", "sat"}));
  EXPECT_FALSE(v2.contains("dog"));
  EXPECT_EQ(v2.id("dog"), kUnkId);
  Vocab v3 = Vocab::build(corpus, 4);
  EXPECT_EQ(v3.size(), 4);
  // Corpus order does not matter.
  std::vector<Strings> reversed(corpus.rbegin(), corpus.rend());
  EXPECT_EQ(Vocab::build(reversed), v1);
  expect_error<ValueError>([&] { Vocab::build(corpus, 0); }, {"Vocab::build", "min_freq", "got 0"});
  // From raw text through a tokenizer.
  Vocab v4 = Vocab::build(Strings{"the cat sat", "the  dog sat", "the cat <unk> ran"}, WhitespaceTokenizer());
  EXPECT_EQ(v4, v1);
}

TEST(Vocab, FromSymbols) {
  Vocab v = Vocab::from_symbols({"x", "y", "z"});
  EXPECT_EQ(v.size(), 7);
  EXPECT_EQ(v.id("x"), 4);
  EXPECT_EQ(v.id("z"), 6);
  EXPECT_EQ(v.token(5), "y");
  expect_error<ValueError>([] { Vocab::from_symbols({"x", "y", "x"}); },
                           {"Vocab::from_symbols", "duplicate symbol 'x'", "position 2"});
  expect_error<ValueError>([] { Vocab::from_symbols({"x", "<eos>"}); }, {"from_symbols", "special token '<eos>'"});
  expect_error<ValueError>([] { Vocab::from_symbols({"x", ""}); }, {"from_symbols", "empty token", "position 1"});
  expect_error<ValueError>([] { Vocab::from_symbols({"a\nb"}); }, {"from_symbols", "line break"});
}

TEST(Vocab, EncodeDecodeRoundTrip) {
  Vocab v = Vocab::from_symbols({"hello", "world", "!"});
  Strings words = {"hello", "world", "!", "hello"};
  Ids ids = v.encode(words);
  EXPECT_EQ(ids, (Ids{4, 5, 6, 4}));
  EXPECT_EQ(v.decode(ids), words);
  EXPECT_EQ(v.decode(Ids{1, 4, 3, 2, 0}), (Strings{"<bos>", "hello", "<unk>", "<eos>", "<pad>"}));
  EXPECT_EQ(v.decode_sequence(Ids{1, 4, 0, 5, 2, 6, 6}), (Strings{"hello", "world"}));
  EXPECT_EQ(v.decode_sequence(Ids{4, 3}), (Strings{"hello", "<unk>"}));
  expect_error<IndexError>([&] { v.decode(Ids{4, 7}); }, {"Vocab::token", "id 7", "size 7"});
  expect_error<IndexError>([&] { v.token(-1); }, {"Vocab::token", "id -1"});
}

TEST(Vocab, UnknownTokens) {
  Vocab v = Vocab::from_symbols({"a", "b"});
  EXPECT_EQ(v.encode({"a", "zz", "b"}), (Ids{4, kUnkId, 5}));
  EXPECT_EQ(v.encode({"a", "b"}, OnUnknown::error), (Ids{4, 5}));
  expect_error<ValueError>([&] { v.encode({"a", "b", "zz"}, OnUnknown::error); },
                           {"Vocab::encode", "unknown token 'zz'", "position 2"});
}

TEST(Vocab, AddAndValidation) {
  Vocab v;
  EXPECT_EQ(v.add("x"), 4);
  EXPECT_EQ(v.add("y"), 5);
  EXPECT_EQ(v.add("x"), 4);
  EXPECT_EQ(v.add("<unk>"), kUnkId);
  EXPECT_EQ(v.size(), 6);
  expect_error<ValueError>([&] { v.add(""); }, {"Vocab::add", "empty token"});
  expect_error<ValueError>([&] { v.add("a\r"); }, {"Vocab::add", "line break"});
  expect_error<ValueError>([] { Vocab::build({{"ok", "bad\n"}}); }, {"Vocab::build", "line break"});
}

TEST(Vocab, SaveLoadRoundTrip) {
  Vocab v = Vocab::build(Strings{"Straße über café", "a b"}, CharTokenizer());
  EXPECT_TRUE(v.contains(" "));
  EXPECT_TRUE(v.contains("ß"));
  TempFile f("roundtrip.txt");
  v.save(f.path);
  Vocab back = Vocab::load(f.path);
  EXPECT_EQ(back, v);
  EXPECT_EQ(back.id(" "), v.id(" "));
  EXPECT_EQ(back.id("é"), v.id("é"));
  // The file is one token per line, line number - 1 = id.
  std::ifstream in(f.path, std::ios::binary);
  std::string line;
  int64_t id = 0;
  while (std::getline(in, line)) EXPECT_EQ(line, v.token(id++));
  EXPECT_EQ(id, v.size());
}

TEST(Vocab, LoadAcceptsCrlfAndNoFinalNewline) {
  TempFile f("crlf.txt", "<pad>\r\n<bos>\r\n<eos>\r\n<unk>\r\nx\r\ny");
  EXPECT_EQ(Vocab::load(f.path), Vocab::from_symbols({"x", "y"}));
}

TEST(Vocab, CorruptFilesRejectedWithLineNumbers) {
  expect_error<IOError>([] { Vocab::load("/nonexistent/attograd/vocab.txt"); },
                        {"cannot open", "/nonexistent/attograd/vocab.txt"});
  {
    TempFile f("order.txt", "<pad>\n<eos>\n<bos>\n<unk>\nx\n");
    expect_error<IOError>([&] { Vocab::load(f.path); }, {"Vocab::load", "line 2", "expected '<bos>'", "got '<eos>'"});
  }
  {
    TempFile f("nospecials.txt", "a\nb\n");
    expect_error<IOError>([&] { Vocab::load(f.path); }, {"line 1", "expected '<pad>'", "got 'a'"});
  }
  {
    TempFile f("short.txt", "<pad>\n<bos>\n");
    expect_error<IOError>([&] { Vocab::load(f.path); }, {"Vocab::load", "2 line(s)", "4 special tokens"});
  }
  {
    TempFile f("empty_line.txt", "<pad>\n<bos>\n<eos>\n<unk>\nx\n\ny\n");
    expect_error<IOError>([&] { Vocab::load(f.path); }, {"Vocab::load", "line 6", "empty token"});
  }
  {
    TempFile f("dup.txt", "<pad>\n<bos>\n<eos>\n<unk>\nx\ny\nx\n");
    expect_error<IOError>([&] { Vocab::load(f.path); }, {"line 7", "duplicate token 'x'", "first on line 5"});
  }
  {
    TempFile f("dup_special.txt", "<pad>\n<bos>\n<eos>\n<unk>\nx\n<bos>\n");
    expect_error<IOError>([&] { Vocab::load(f.path); }, {"line 6", "duplicate token '<bos>'", "first on line 2"});
  }
  {
    TempFile f("zero.txt");
    std::ofstream(f.path, std::ios::binary).close();
    expect_error<IOError>([&] { Vocab::load(f.path); }, {"0 line(s)"});
  }
  expect_error<IOError>([] { Vocab().save("/nonexistent/attograd/out.txt"); }, {"Vocab::save", "cannot open"});
}

// ---- tokenizers -------------------------------------------------------------

TEST(Tokenizer, Whitespace) {
  WhitespaceTokenizer t;
  EXPECT_EQ(t.split("  twenty\tone \n hundred  "), (Strings{"twenty", "one", "hundred"}));
  EXPECT_EQ(t.split(""), Strings{});
  EXPECT_EQ(t.split(" \t "), Strings{});
  EXPECT_EQ(t.split("einundzwanzig größer"), (Strings{"einundzwanzig", "größer"}));
  EXPECT_EQ(t.join({"vingt", "et", "un"}), "vingt et un");
  EXPECT_EQ(t.join({}), "");
  EXPECT_EQ(t.name(), "word");
}

TEST(Tokenizer, CharSplitsUtf8CodePoints) {
  CharTokenizer t;
  EXPECT_EQ(t.split("süß"), (Strings{"s", "ü", "ß"}));
  EXPECT_EQ(t.split("é t"), (Strings{"é", " ", "t"}));
  EXPECT_EQ(t.split("€😀x"), (Strings{"€", "😀", "x"}));  // 3- and 4-byte code points
  EXPECT_EQ(t.split("ß")[0].size(), 2u);
  EXPECT_EQ(t.split(""), Strings{});
  for (std::string s : {"dreihundertfünfundachtzig", "quatre-vingt-dix-sept élèves", "Straße über"}) {
    EXPECT_EQ(t.join(t.split(s)), s);
  }
  EXPECT_EQ(t.split("fünf").size(), 4u);
  EXPECT_EQ(t.name(), "char");
}

TEST(Tokenizer, CharRejectsInvalidUtf8) {
  CharTokenizer t;
  expect_error<ValueError>([&] { t.split("a\x80"); }, {"CharTokenizer::split", "lead byte 0x80", "byte 1"});
  expect_error<ValueError>([&] { t.split("ab\xC3"); }, {"truncated", "byte 2"});
  expect_error<ValueError>([&] { t.split("\xC3x"); }, {"invalid UTF-8 byte 0x78", "byte 1"});
  expect_error<ValueError>([&] { t.split("\xC0\xAF"); }, {"lead byte 0xC0"});         // overlong '/'
  expect_error<ValueError>([&] { t.split("\xE0\x80\xAF"); }, {"byte 0x80"});          // overlong 3-byte
  expect_error<ValueError>([&] { t.split("\xED\xA0\x80"); }, {"byte 0xA0"});          // surrogate U+D800
  expect_error<ValueError>([&] { t.split("\xF4\x90\x80\x80"); }, {"byte 0x90"});      // above U+10FFFF
  expect_error<ValueError>([&] { t.split("\xE2\x82x"); }, {"continuation byte 0x78", "byte 2"});
}

TEST(Tokenizer, Factory) {
  EXPECT_EQ(make_tokenizer("word")->name(), "word");
  EXPECT_EQ(make_tokenizer("whitespace")->name(), "word");
  EXPECT_EQ(make_tokenizer("char")->name(), "char");
  expect_error<ValueError>([] { make_tokenizer("bpe"); }, {"make_tokenizer", "'bpe'", "'word', 'hyphen' or 'char'"});
}
