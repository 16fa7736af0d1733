// Head roles (examples/heads_study/alignment.h, roles.h): gold alignments
// spelled from the number column, hand-checked in French and German (71, 80,
// 1,000 and a six-digit gen.tsv number) and checked against every row of the
// test, valid and gen splits; alignment scoring, the bootstrap, Spearman,
// the matching of heads, and the whole analysis on a tiny model.
#include <gtest/gtest.h>

#include <cmath>

#include "examples/heads_study/roles.h"
#include "test_util.h"

using namespace attograd;
using namespace attograd::app;
using namespace attograd::app::heads;
using attograd::testing::expect_error;

namespace {

const std::string kData = std::string(ATTOGRAD_SOURCE_DIR) + "/data/numbers";

uint32_t roles(std::initializer_list<Role> rs) {
  uint32_t m = 0;
  for (Role r : rs) m |= 1u << static_cast<int>(r);
  return m;
}

struct Want {
  std::string text;
  std::vector<int64_t> sources;
  uint32_t roles;
};

void expect_target(const AlignedSentence& s, const std::vector<Want>& want) {
  ASSERT_EQ(s.target.size(), want.size()) << target_text(s);
  for (size_t t = 0; t < want.size(); ++t) {
    EXPECT_EQ(s.target[t].text, want[t].text) << "token " << t;
    EXPECT_EQ(s.target[t].sources, want[t].sources) << "token " << t << " " << want[t].text;
    EXPECT_EQ(s.target[t].roles, want[t].roles) << "token " << t << " " << want[t].text;
  }
}

// German tokens are characters: one Want per character of each piece.
std::vector<Want> chars(const std::vector<Want>& pieces) {
  std::vector<Want> out;
  for (const Want& p : pieces) {
    if (p.text == "<eos>") {
      out.push_back(p);
      continue;
    }
    for (size_t at = 0; at < p.text.size();) {
      const size_t len = utf8_char_length(p.text, at, "test");
      out.push_back({p.text.substr(at, len), p.sources, p.roles});
      at += len;
    }
  }
  return out;
}

const uint32_t kConnector = roles({Role::connector});
const uint32_t kEos = roles({Role::eos});

}  // namespace

TEST(AlignNumber, SeventyOneIsSixtyPlusElevenInFrenchAndUnitsFirstInGerman) {
  const AlignedSentence fr = align_number(71, "fr");
  EXPECT_EQ(fr.source, (std::vector<std::string>{"seventy", "-", "one", "<eos>"}));
  EXPECT_EQ(target_text(fr), "soixante et onze");
  const uint32_t sixty = roles({Role::sixty_plus});
  expect_target(fr, {{"soixante", {0}, roles({Role::tens}) | sixty},
                     {"et", {1}, kConnector},
                     {"onze", {0, 2}, roles({Role::tens, Role::units}) | sixty},
                     {"<eos>", {3}, kEos}});
  const AlignedSentence de = align_number(71, "de");
  EXPECT_EQ(target_text(de), "einundsiebzig");
  expect_target(de, chars({{"ein", {2}, roles({Role::units})},
                           {"und", {1}, kConnector},
                           {"siebzig", {0}, roles({Role::tens})},
                           {"<eos>", {3}, kEos}}));
}

TEST(AlignNumber, EightyIsFourTwenties) {
  const AlignedSentence fr = align_number(80, "fr");
  EXPECT_EQ(target_text(fr), "quatre-vingts");
  const uint32_t tens = roles({Role::tens, Role::four_twenty});
  expect_target(fr, {{"quatre", {0}, tens}, {"-", {0}, kConnector}, {"vingts", {0}, tens}, {"<eos>", {1}, kEos}});
  expect_target(align_number(80, "de"), chars({{"achtzig", {0}, roles({Role::tens})}, {"<eos>", {1}, kEos}}));
  // 91 = 4 x 20 + 11: onze says the 10 of ninety and the one.
  const AlignedSentence f91 = align_number(91, "fr");
  EXPECT_EQ(target_text(f91), "quatre-vingt-onze");
  EXPECT_EQ(f91.target[4].text, "onze");
  EXPECT_EQ(f91.target[4].sources, (std::vector<int64_t>{0, 2}));
}

TEST(AlignNumber, OneThousand) {
  // "one thousand": mille alone says both words; German says ein + tausend.
  const AlignedSentence fr = align_number(1000, "fr");
  EXPECT_EQ(fr.source, (std::vector<std::string>{"one", "thousand", "<eos>"}));
  expect_target(fr, {{"mille", {0, 1}, roles({Role::units, Role::thousands_group, Role::thousand_word})},
                     {"<eos>", {2}, kEos}});
  expect_target(align_number(1000, "de"),
                chars({{"ein", {0}, roles({Role::units, Role::thousands_group})},
                       {"tausend", {1}, roles({Role::thousand_word})},
                       {"<eos>", {2}, kEos}}));
}

TEST(AlignNumber, SixDigitGenNumber) {
  // gen.tsv: 887717, eight hundred and eighty-seven thousand seven hundred and seventeen.
  const AlignedSentence fr = align_number(887717, "fr");
  EXPECT_EQ(source_text(fr), "eight hundred and eighty-seven thousand seven hundred and seventeen");
  //            0        1       2      3     4    5       6        7       8       9       10      11
  EXPECT_EQ(fr.source, (std::vector<std::string>{"eight", "hundred", "and", "eighty", "-", "seven", "thousand", "seven",
                                                 "hundred", "and", "seventeen", "<eos>"}));
  const uint32_t th = roles({Role::thousands_group}), four = roles({Role::four_twenty});
  const uint32_t hundreds = roles({Role::hundreds}), teen = roles({Role::teen});
  expect_target(fr, {{"huit", {0}, hundreds | th},
                     {"cent", {1}, hundreds | th},
                     {"quatre", {3}, roles({Role::tens}) | four | th},
                     {"-", {3}, kConnector},
                     {"vingt", {3}, roles({Role::tens}) | four | th},
                     {"-", {4}, kConnector},
                     {"sept", {5}, roles({Role::units}) | four | th},
                     {"mille", {6}, roles({Role::thousand_word})},
                     {"sept", {7}, hundreds},
                     {"cent", {8}, hundreds},
                     {"dix", {10}, teen},
                     {"-", {10}, kConnector},
                     {"sept", {10}, teen},
                     {"<eos>", {11}, kEos}});
  const AlignedSentence de = align_number(887717, "de");
  EXPECT_EQ(target_text(de), "achthundertsiebenundachtzigtausendsiebenhundertsiebzehn");
  expect_target(de, chars({{"acht", {0}, hundreds | th},
                           {"hundert", {1}, hundreds | th},
                           {"sieben", {5}, roles({Role::units}) | th},
                           {"und", {4}, kConnector},
                           {"achtzig", {3}, roles({Role::tens}) | th},
                           {"tausend", {6}, roles({Role::thousand_word})},
                           {"sieben", {7}, hundreds},
                           {"hundert", {8}, hundreds},
                           {"siebzehn", {10}, teen},
                           {"<eos>", {11}, kEos}}));
}

TEST(AlignNumber, EveryRowOfTheHeldOutSplitsIsSpelledAsTheCorpus) {
  // gold_split fails naming the line if either text differs from align_number's.
  for (const char* lang : {"fr", "de"})
    for (const char* split : {"test", "valid", "gen"}) {
      const std::vector<AlignedSentence> gold = gold_split(kData, split, lang, 1'000'000);
      EXPECT_EQ(gold.size(), 2000u) << lang << " " << split;
      for (const AlignedSentence& s : gold)
        for (const AlignedToken& t : s.target) {
          EXPECT_FALSE(t.sources.empty()) << lang << " " << s.number << " '" << t.text << "'";
          EXPECT_TRUE(!t.has(Role::connector) || t.roles == kConnector) << lang << " " << s.number;
        }
    }
}

TEST(AlignNumber, Errors) {
  expect_error<ValueError>([] { align_number(5, "es"); }, {"align_number", "fr and de", "'es'"});
  expect_error<ValueError>([] { align_number(1'000'000, "fr"); }, {"align_number", "1000000", "outside"});
}

TEST(ScoreAlignment, PerfectDiagonalAndRoleSlots) {
  const std::vector<AlignedSentence> gold = {align_number(71, "fr"), align_number(1000, "fr")};
  const auto perfect = score_alignment(gold, [&](size_t i, size_t t) { return gold[i].target[t].sources.front(); });
  // 71: soixante, onze are content; et a connector; then <eos>. 1000: mille, <eos>.
  EXPECT_EQ(perfect[0].tokens[kContent], 2);
  EXPECT_EQ(perfect[0].hits[kContent], 2);
  EXPECT_EQ(perfect[0].tokens[static_cast<size_t>(Role::sixty_plus)], 2);
  EXPECT_EQ(perfect[1].hits[static_cast<size_t>(Role::thousand_word)], 1);
  EXPECT_EQ(perfect[1].tokens[static_cast<size_t>(Role::eos)], 1);
  // Always position 2: onze (sources 0, 2) is right, soixante is not; mille's EOS row hits <eos>.
  const auto fixed = score_alignment(gold, [](size_t, size_t) { return int64_t{2}; });
  EXPECT_EQ(fixed[0].hits[kContent], 1);
  EXPECT_EQ(fixed[0].hits[static_cast<size_t>(Role::units)], 1);
  EXPECT_EQ(fixed[0].hits[static_cast<size_t>(Role::tens)], 1);
  EXPECT_EQ(fixed[1].hits[static_cast<size_t>(Role::eos)], 1);
  EXPECT_EQ(fixed[1].hits[kContent], 0);
}

TEST(SentenceBootstrap, RatioAndInterval) {
  const SentenceBootstrap boot(4, 200, 7);
  const Estimate r = boot.ratio({1, 2, 3, 4}, {2, 2, 2, 2});
  EXPECT_DOUBLE_EQ(r.value, 10.0 / 8);
  EXPECT_LE(r.lo, r.value);
  EXPECT_GE(r.hi, r.value);
  EXPECT_LT(r.lo, r.hi);  // the sentences differ, so resamples do
  EXPECT_GE(r.lo, 0.5);
  EXPECT_LE(r.hi, 2.0);
  const Estimate c = boot.ratio({3, 3, 3, 3}, {1, 1, 1, 1});
  EXPECT_EQ(c.lo, 3);
  EXPECT_EQ(c.hi, 3);
}

TEST(Spearman, RanksAndTies) {
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {10, 20, 30, 400}), 1.0);
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {1, 1, 2, 2}), 4 / std::sqrt(20.0), 1e-12);
  EXPECT_EQ(spearman({1, 2, 3}, {5, 5, 5}), 0.0);
  expect_error<ValueError>([] { spearman({1}, {1}); }, {"spearman", "same size >= 2"});
}

TEST(BestMatching, FindsTheCheapestPermutation) {
  // Greedy on row 0 takes column 0 (cost 1) and then pays 10; the best is 0->1, 1->0, 2->2.
  const std::vector<std::vector<double>> cost = {{1, 2, 9}, {2, 10, 9}, {9, 9, 1}};
  EXPECT_EQ(best_matching(cost), (std::vector<int64_t>{1, 0, 2}));
  expect_error<ValueError>([] { best_matching(std::vector<std::vector<double>>(9, std::vector<double>(9, 0.0))); },
               {"best_matching", "<= 8", "linear_sum_assignment"});
}

TEST(AnalyseRoles, TinyModelCoversEveryHead) {
  const std::vector<AlignedSentence> test = gold_split(kData, "test", "fr", 24);
  ParallelText text;
  for (const AlignedSentence& s : test) {
    text.sources.push_back(source_text(s));
    text.targets.push_back(target_text(s));
    text.line_numbers.push_back(0);
  }
  const Translator tr = Translator::from_training_text(TranslationTask::for_language("fr"), text);
  TransformerConfig c;
  c.src_vocab = tr.src_vocab.size();
  c.tgt_vocab = tr.tgt_vocab.size();
  c.d_model = 8; c.heads = 2; c.d_ff = 16; c.enc_layers = 1; c.dec_layers = 2; c.dropout = 0.0; c.max_len = 40;
  Generator gen(5);
  Seq2SeqTransformer model(c, gen, nullptr);
  StudyOptions o;
  o.ablation_size = 6;
  o.inspect_heads = 2;

  const std::vector<HeadArgmax> argmax = cross_attention_argmax(model, tr, test);
  ASSERT_EQ(argmax.size(), 4u);  // 2 decoder layers x 2 heads
  EXPECT_EQ(argmax[2].layer, 1);
  for (const HeadArgmax& h : argmax) {
    ASSERT_EQ(h.argmax.size(), test.size());
    for (size_t i = 0; i < test.size(); ++i) {
      ASSERT_EQ(h.argmax[i].size(), test[i].target.size());
      for (int64_t s : h.argmax[i]) {
        EXPECT_GE(s, 0);
        EXPECT_LT(s, static_cast<int64_t>(test[i].source.size()));  // never a padding position
      }
    }
  }

  const ModelRoles m = analyse_roles(o, tr, model, test, tr.encode(text), tr.encode(text), 3);
  EXPECT_EQ(m.sentences, 24);
  EXPECT_EQ(m.scored_sentences, 6);
  ASSERT_EQ(m.cross.size(), 4u);
  for (const HeadRoles& h : m.cross) {
    const Estimate& a = h.accuracy[kContent];
    EXPECT_GE(a.lo, 0);
    EXPECT_LE(a.lo, a.value);
    EXPECT_LE(a.value, a.hi);
    EXPECT_LE(a.hi, 100);
  }
  ASSERT_EQ(m.scores.size(), 5u * 2u);  // (encoder self + 2 x (decoder self, cross)) x 2 heads
  for (const HeadScore& s : m.scores) {
    // Fisher is the mean of g², importance the mean of |g|: Jensen.
    EXPECT_GE(s.fisher.value, s.importance.value * s.importance.value * (1 - 1e-9)) << s.module << " " << s.head;
    EXPECT_GT(s.importance.value, 0) << s.module << " " << s.head;
    EXPECT_GT(s.entropy.value, 0);
    EXPECT_LE(s.entropy.value, 1 + 1e-9);  // a share of the uniform ceiling
    EXPECT_GT(s.confidence.value, 0);
    EXPECT_LE(s.confidence.value, 1 + 1e-9);
  }
  ASSERT_EQ(m.correlations.size(), 10u);  // 5 scores, every pair
  for (const ScoreCorrelation& rho : m.correlations) {
    EXPECT_GE(rho.rho.lo, -1);
    EXPECT_LE(rho.rho.hi, 1);
  }
  EXPECT_GT(m.baselines.tokens[kContent], 24);
  ASSERT_EQ(m.controls.size(), 4u);  // valid and train, 1 and 64 sentences per gradient
  EXPECT_EQ(m.controls[0].data, "valid");
  EXPECT_EQ(m.controls[1].batch, 64);
  // Both splits are the same text here, so the controls agree split for split.
  EXPECT_DOUBLE_EQ(m.controls[0].rho_ablation, m.controls[2].rho_ablation);
  EXPECT_DOUBLE_EQ(m.controls[1].rho_ablation, m.controls[3].rho_ablation);
}
