// translate on sentence pairs rather than number words, run as a subprocess:
// a user's corpus (a TSV with or without a header, or two aligned files) with
// SentencePiece subwords learns a small reordering language well enough that
// test BLEU and chrF are printed high, eval and translate read the checkpoint
// back (its subword models beside it, checked by CRC), checkpoint averaging
// and prepare/score work, the gettext corpus trains when the machine has the
// catalogs, and every bad input gets exit code 2, one line on stderr, and no
// checkpoint written.
//
// Labelled "slow" (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <filesystem>

#include <attograd/version.h>

#include "test_util.h"

namespace fs = std::filesystem;
using attograd::testing::lines_of;
using attograd::testing::ProgramOutcome;
using attograd::testing::read_text;
using attograd::testing::write_text;

namespace {

const std::string kProgram = std::string(ATTOGRAD_BIN_DIR) + "/translate";

// A toy pair of languages with real text's traits (case, punctuation, words
// split into subwords) and a reordering: "The red cat sleeps." ->
// "Le chat rouge dort." (the adjective follows the noun).
struct Toy {
  std::vector<std::string> en, fr;
};
Toy toy_corpus() {
  const std::vector<std::pair<std::string, std::string>> nouns = {
      {"cat", "chat"}, {"dog", "chien"}, {"bird", "oiseau"}, {"horse", "cheval"},
      {"fish", "poisson"}, {"wolf", "loup"}, {"bear", "ours"}, {"mouse", "rat"}};
  const std::vector<std::pair<std::string, std::string>> adjectives = {
      {"red", "rouge"}, {"big", "grand"}, {"small", "petit"}, {"old", "vieux"},
      {"black", "noir"}, {"white", "blanc"}, {"green", "vert"}, {"quiet", "calme"}};
  const std::vector<std::pair<std::string, std::string>> verbs = {
      {"sleeps", "dort"}, {"eats", "mange"}, {"runs", "court"}, {"sings", "chante"}, {"waits", "attend"}};
  Toy t;
  for (const auto& [n, nf] : nouns)
    for (const auto& [a, af] : adjectives)
      for (const auto& [v, vf] : verbs) {
        t.en.push_back("The " + a + " " + n + " " + v + ".");
        t.fr.push_back("Le " + nf + " " + af + " " + vf + ".");
      }
  return t;  // 320 pairs
}

const std::vector<std::string> kTiny = {"--d-model", "64", "--heads", "2", "--d-ff", "128", "--enc-layers", "1",
                                        "--dec-layers", "1", "--max-len", "32",
                                        "--max-tokens", "400", "--quiet", "--threads", "1", "--dropout", "0"};

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The number after `key` on the line starting with `prefix` (-1 when absent).
double metric(const std::string& out, const std::string& prefix, const std::string& key) {
  for (const auto& line : lines_of(out))
    if (line.starts_with(prefix)) {
      const size_t at = line.find(key + " ");
      if (at != std::string::npos) return std::stod(line.substr(at + key.size() + 1));
    }
  return -1;
}

class TranslateText : public ::testing::Test {
 protected:
  void SetUp() override {
    // translate reads real text as SentencePiece subwords.
    if (!attograd::build_features().sentencepiece) GTEST_SKIP() << "built without SentencePiece (ATTOGRAD_SENTENCEPIECE=OFF)";
    ASSERT_TRUE(fs::exists(kProgram)) << kProgram << " does not exist; build the translate target first";
    const Toy t = toy_corpus();
    std::string tsv = "#en\tfr\n", en, fr;
    for (size_t i = 0; i < t.en.size(); ++i) {
      tsv += t.en[i] + "\t" + t.fr[i] + "\n";
      en += t.en[i] + "\n";
      fr += t.fr[i] + "\n";
    }
    fs::create_directories(tsv_dir_);
    fs::create_directories(moses_dir_);
    write_text(tsv_dir_ + "/train.tsv", tsv);
    write_text(moses_dir_ + "/train.en", en);
    write_text(moses_dir_ + "/train.fr", fr);
  }
  ProgramOutcome run(const std::vector<std::string>& args, const std::string& input = "") {
    return attograd::testing::run_program(kProgram, args, dir_, input);
  }
  // One line on stderr, exit code 2, the message holding `needle`.
  void expect_refused(const std::vector<std::string>& args, const std::string& needle) {
    const ProgramOutcome o = run(args);
    EXPECT_EQ(o.code, 2) << o.out << o.err;
    EXPECT_EQ(lines_of(o.err).size(), 1u) << o.err;
    EXPECT_NE(o.err.find(needle), std::string::npos) << o.err;
  }
  attograd::testing::TempDir tmp_{"translate_text"};
  std::string dir_ = tmp_.path, tsv_dir_ = dir_ + "/tsv", moses_dir_ = dir_ + "/moses";
};

TEST_F(TranslateText, LearnsAReorderingWithSubwordsThenEvalTranslateAndAverageAgree) {
  const std::string ck = dir_ + "/ck";
  const ProgramOutcome t = run(std::vector<std::string>{"train", "--corpus", tsv_dir_, "--tgt", "fr", "--valid-size",
                                                        "20", "--test-size", "40", "--steps", "400", "--lr", "3e-3",
                                                        "--warmup", "50", "--eval-every", "100", "--beam", "1",
                                                        "--checkpoint-dir", ck, "--keep-last", "3",
                                                        "--average-last", "2", "--samples", "2", "--vocab-size", "60"} + kTiny);
  ASSERT_EQ(t.code, 0) << t.out << t.err;
  EXPECT_NE(t.out.find("en -> fr (unigram subwords, joint)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("260 training pairs"), std::string::npos) << t.out;  // 320 less 20 valid and 40 test
  EXPECT_NE(t.out.find("averaged the last 2 checkpoints"), std::string::npos) << t.out;
  const double bleu = metric(t.out, "test (40 sentences", "BLEU"), chrf = metric(t.out, "test (40 sentences", "chrF");
  EXPECT_GT(bleu, 60) << t.out;  // an untrained model scores near 0
  EXPECT_GT(chrf, 75) << t.out;
  EXPECT_TRUE(fs::exists(ck + "/sentencepiece.model"));
  EXPECT_TRUE(fs::exists(ck + "/average.model.safetensors"));

  // eval of the averaged model on the same carved test split prints the training run's test numbers.
  const ProgramOutcome e = run({"eval", "--checkpoint", ck + "/average.model.safetensors", "--corpus", tsv_dir_,
                                "--tgt", "fr", "--valid-size", "20", "--test-size", "40", "--split", "test"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(metric(e.out, "test (40 sentences", "BLEU"), bleu) << e.out << t.out;

  // Case and punctuation survive; the adjective moves after the noun.
  const ProgramOutcome a = run({"translate", "--checkpoint", ck, "The black wolf sings.", "The small fish eats."});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(lines_of(a.out).size(), 2u) << a.out;
  EXPECT_EQ(lines_of(a.out)[0], "Le loup noir chante.") << a.out;
  EXPECT_EQ(lines_of(a.out)[1], "Le poisson petit mange.") << a.out;

  // A character the model never saw is named in a warning, and the line still translates.
  const ProgramOutcome z = run({"translate", "--checkpoint", ck, "The red cat sleeps\u2603"});
  ASSERT_EQ(z.code, 0) << z.err;
  EXPECT_NE(z.err.find("unknown character \"\u2603\" read as <unk>"), std::string::npos) << z.err;
  EXPECT_EQ(lines_of(z.out).size(), 1u);

  // A subword model that is not the checkpoint's is refused by its CRC.
  write_text(ck + "/sentencepiece.model", read_text(ck + "/sentencepiece.model") + "x");
  const ProgramOutcome bad = run({"translate", "--checkpoint", ck, "The red cat sleeps."});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("CRC-32"), std::string::npos) << bad.err;
}

TEST_F(TranslateText, AlignedFilesWithSeparateVocabulariesAndPrepareScore) {
  const std::string ck = dir_ + "/ck2";
  const ProgramOutcome t = run(std::vector<std::string>{"train", "--corpus", moses_dir_, "--src", "en", "--tgt", "fr",
                                                        "--separate-vocab", "--valid-size", "20", "--test-size", "20",
                                                        "--steps", "30", "--eval-every", "0", "--beam", "2",
                                                        "--checkpoint-dir", ck, "--samples", "0", "--vocab-size", "36"} + kTiny);
  ASSERT_EQ(t.code, 0) << t.out << t.err;
  EXPECT_NE(t.out.find("en -> fr (unigram subwords)"), std::string::npos) << t.out;
  EXPECT_TRUE(fs::exists(ck + "/sentencepiece.en.model"));
  EXPECT_TRUE(fs::exists(ck + "/sentencepiece.fr.model"));
  EXPECT_GE(metric(t.out, "test (20 sentences, beam 2", "BLEU"), 0) << t.out;

  // prepare writes the same carved parts as TSV; score reads them back.
  const ProgramOutcome p = run({"prepare", "--corpus", moses_dir_, "--tgt", "fr", "--valid-size", "20", "--test-size",
                                "20", "--out", dir_ + "/prep"});
  ASSERT_EQ(p.code, 0) << p.err;
  const auto test_lines = lines_of(read_text(dir_ + "/prep/test.tsv"));
  ASSERT_EQ(test_lines.size(), 21u);
  EXPECT_EQ(test_lines[0], "#en\tfr");
  std::string refs;
  for (size_t i = 1; i < test_lines.size(); ++i) refs += test_lines[i].substr(test_lines[i].find('\t') + 1) + "\n";
  write_text(dir_ + "/hyp.txt", refs);
  const ProgramOutcome s = run({"score", "--hyp", dir_ + "/hyp.txt", "--ref", dir_ + "/prep/test.tsv"});
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("20 sentences: BLEU 100.00"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("chrF 100.00"), std::string::npos) << s.out;
  write_text(dir_ + "/short.txt", "Le chat.\n");
  expect_refused({"score", "--hyp", dir_ + "/short.txt", "--ref", dir_ + "/prep/test.tsv"}, "1 hypotheses for 20");
}

TEST_F(TranslateText, ResumingIsExactWithTokenBatchesAndTheSavedSubwords) {
  // 12 steps straight vs 6 + resume to 12, with dropout and token batches: the same final model file, byte for
  // byte but for its run id. The resumed run reads its subword model from the directory (not retrained). The
  // first part passes --resume too, into a new directory, as a job script that always passes it does: that is
  // a new run, which must write its subword models.
  const std::vector<std::string> flags = {"--corpus", tsv_dir_, "--tgt", "fr", "--valid-size", "10",
                                          "--test-size", "10", "--dropout", "0.1", "--vocab-size", "50",
                                          "--eval-every", "0", "--eval-size", "8", "--samples", "0"};
  const std::string whole = dir_ + "/whole", split = dir_ + "/split";
  // kTiny before flags: its --dropout 0 is overridden by the 0.1 in flags (the last value counts).
  ASSERT_EQ(run(std::vector<std::string>{"train"} + kTiny + flags + std::vector<std::string>{"--steps", "12", "--checkpoint-dir", whole}).code, 0);
  ASSERT_EQ(run(std::vector<std::string>{"train"} + kTiny + flags + std::vector<std::string>{"--steps", "12", "--stop-after", "6", "--resume",
                                                          "--checkpoint-dir", split}).code, 0);
  // Resuming with another vocabulary size is refused, naming the saved one: the run keeps its subword model.
  const ProgramOutcome other_vocab = run(std::vector<std::string>{"train"} + kTiny + flags + std::vector<std::string>{"--steps", "12", "--resume",
                                                                                   "--checkpoint-dir", split,
                                                                                   "--vocab-size", "40"});
  EXPECT_EQ(other_vocab.code, 2);
  EXPECT_NE(other_vocab.err.find("--vocab-size 50"), std::string::npos) << other_vocab.err;
  const ProgramOutcome r = run(std::vector<std::string>{"train"} + kTiny + flags + std::vector<std::string>{"--steps", "12", "--resume",
                                                                         "--checkpoint-dir", split});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string a = attograd::testing::without_run_id(whole + "/step-00000012.model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == attograd::testing::without_run_id(split + "/step-00000012.model.safetensors"));
  // Another token budget makes other batches: resuming with it is refused, naming both.
  const ProgramOutcome other = run(std::vector<std::string>{"train"} + kTiny + flags + std::vector<std::string>{"--steps", "14", "--resume",
                                                                             "--checkpoint-dir", split, "--max-tokens",
                                                                             "300"});
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.err.find("--max-tokens"), std::string::npos) << other.err;
}

TEST_F(TranslateText, BadInputIsOneLineAndExitTwoWithNothingWritten) {
  const std::string ck = dir_ + "/never";
  const auto train = [&](const std::string& corpus, std::vector<std::string> extra = {}) {
    return std::vector<std::string>{"train", "--corpus", corpus, "--tgt", "fr", "--checkpoint-dir", ck,
                                    "--valid-size", "5", "--test-size", "5", "--steps", "5", "--vocab-size", "30"} + kTiny + extra;
  };
  const auto corpus_dir = [&](const std::string& name, const std::string& file, const std::string& bytes) {
    const std::string d = dir_ + "/" + name;
    fs::create_directories(d);
    write_text(d + "/" + file, bytes);
    return d;
  };
  // Two files of different lengths: the line without a partner is named.
  const std::string uneven = corpus_dir("uneven", "train.en", "One.\nTwo.\nThree.\n");
  write_text(uneven + "/train.fr", "Un.\nDeux.\n");
  expect_refused(train(uneven), "line 3");
  // A TSV row without a tab.
  expect_refused(train(corpus_dir("notab", "train.tsv", "Hello.\tBonjour.\nGood night. Bonne nuit.\n")), ":2");
  // An empty sentence.
  expect_refused(train(corpus_dir("empty", "train.tsv", "Hello.\tBonjour.\n\tVide.\n")), ":2");
  // Invalid UTF-8: the byte offset is named (line 2 starts at byte 16; the bad byte is its third).
  expect_refused(train(corpus_dir("utf8", "train.tsv", "Hello.\tBonjour.\nCa\xff va.\tCa va.\n")), "byte offset 18");
  // A vocabulary the text cannot hold.
  expect_refused(train(tsv_dir_, {"--vocab-size", "100000"}), "--vocab-size");
  // A catalog that is not a .mo file.
  const std::string locale = dir_ + "/locale/fr/LC_MESSAGES";
  fs::create_directories(locale);
  write_text(locale + "/coreutils.mo", "msgid \"hello\"\nmsgstr \"bonjour\"\n");
  expect_refused({"train", "--corpus", "gettext", "--tgt", "fr", "--locale-dir", dir_ + "/locale", "--checkpoint-dir",
                  ck}, "coreutils.mo");
  // A test sentence too long for --max-len is found before the directory is claimed or a subword model written.
  const std::string long_test = corpus_dir("longtest", "train.tsv", read_text(tsv_dir_ + "/train.tsv"));
  write_text(long_test + "/test.tsv", "#en\tfr\nThe red cat sleeps and the black dog eats and the old horse runs "
             "and the green bird sings and the quiet wolf waits.\tLe chat.\n");
  expect_refused(train(long_test, {"--vocab-size", "60"}), "needs --max-len");
  // --average-last more checkpoints than the run writes is refused before training.
  expect_refused(train(tsv_dir_, {"--average-last", "3", "--eval-every", "0"}), "--average-last 3 needs 3 checkpoints");
  // Flags that do not fit a text corpus.
  expect_refused({"train", "--corpus", tsv_dir_}, "--tgt");
  expect_refused({"train", "--corpus", tsv_dir_, "--tgt", "f/r"}, "not a language name");
  expect_refused({"train", "--corpus", "gettext", "--src", "de", "--tgt", "fr"}, "--src must be en");
  expect_refused(train(tsv_dir_, {"--subword", "words"}), "--subword");
  // Nothing half-written: no checkpoint, no subword model, no run record.
  EXPECT_FALSE(fs::exists(ck + "/sentencepiece.model"));
  EXPECT_FALSE(fs::exists(ck + "/run.json"));
  if (fs::exists(ck)) {
    for (const auto& entry : fs::directory_iterator(ck))
      EXPECT_FALSE(entry.path().filename().string().ends_with(".safetensors")) << entry.path();
  }
}

// The built-in corpus, when this machine has the catalogs scripts/setup installs.
TEST_F(TranslateText, GettextCorpusTrainsAndTranslates) {
  if (!fs::exists("/usr/share/locale/fr/LC_MESSAGES/coreutils.mo"))
    GTEST_SKIP() << "no French coreutils catalog: scripts/setup installs the gettext corpus's packages";
  const std::string ck = dir_ + "/gettext";
  const ProgramOutcome t = run(std::vector<std::string>{"train", "--corpus", "gettext", "--tgt", "fr", "--steps", "10",
                                                        "--eval-every", "0", "--test-size", "50", "--beam", "1",
                                                        "--checkpoint-dir", ck, "--samples", "0", "--vocab-size",
                                                        "500"} + kTiny + std::vector<std::string>{"--max-len", "128"});
  ASSERT_EQ(t.code, 0) << t.out << t.err;
  EXPECT_NE(t.out.find("coreutils"), std::string::npos) << t.out;  // the manifest
  EXPECT_GE(metric(t.out, "test (50 sentences", "chrF"), 0) << t.out;
  const ProgramOutcome a = run({"translate", "--checkpoint", ck, "Permission denied"});
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(lines_of(a.out).size(), 1u) << a.out;
  // Korean too: its catalogs are in the same packages; the test part is the same English sentences.
  const ProgramOutcome ko = run(std::vector<std::string>{"train", "--corpus", "gettext", "--tgt", "ko", "--steps", "5",
                                                         "--eval-every", "0", "--test-size", "20", "--beam", "1",
                                                         "--samples", "0", "--vocab-size", "1500"} + kTiny +
                                std::vector<std::string>{"--max-len", "128"});
  ASSERT_EQ(ko.code, 0) << ko.out << ko.err;
  EXPECT_NE(ko.out.find("en -> ko"), std::string::npos) << ko.out;
  EXPECT_GE(metric(ko.out, "test (20 sentences", "chrF"), 0) << ko.out;
}

}  // namespace
