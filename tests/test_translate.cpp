// Decoding properties the translate program relies on, on number-corpus
// sentences (data/numbers/valid.tsv) and models with random weights (the
// properties hold for any model): beam size 1 is greedy, and beam search never
// returns a hypothesis whose model score is below greedy's, scored
// independently by sequence_log_prob (teacher-forced).
#include <gtest/gtest.h>

#include <cmath>

#include <attograd/autograd/engine.h>
#include <attograd/data/parallel.h>
#include <attograd/nn/generate.h>

using namespace attograd;

namespace {

struct Sentences {
  std::vector<Tensor> sources;  // [1, S] each, ending in <eos>
  int64_t src_vocab = 0, tgt_vocab = 0;
};

Sentences number_sentences(const std::string& lang, int64_t n) {
  const ParallelText text = read_parallel_tsv(std::string(ATTOGRAD_SOURCE_DIR) + "/data/numbers/valid.tsv", "en", lang);
  const auto st = make_tokenizer(kNumberSourceTokenizer);
  const auto tt = make_tokenizer(number_target_tokenizer(lang));
  const Vocab sv = Vocab::build(text.sources, *st), tv = Vocab::build(text.targets, *tt);
  Sentences s{{}, sv.size(), tv.size()};
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> ids = sv.encode(st->split(text.sources[i]));
    ids.push_back(kEosId);
    s.sources.push_back(Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())}));
  }
  return s;
}

// A random model whose output layer favours <eos> a little, so hypotheses end
// at different lengths instead of all running to max_len.
std::unique_ptr<Seq2SeqTransformer> random_model(const Sentences& s, uint64_t seed) {
  TransformerConfig c;
  c.src_vocab = s.src_vocab;
  c.tgt_vocab = s.tgt_vocab;
  c.d_model = 32;
  c.heads = 4;
  c.d_ff = 64;
  c.enc_layers = c.dec_layers = 2;
  c.dropout = 0;
  c.max_len = 32;
  Generator gen(seed);
  auto m = std::make_unique<Seq2SeqTransformer>(c, gen, nullptr);
  NoGradGuard no_grad;
  m->generator->bias.data<float>()[kEosId] += 0.5f;
  m->eval();
  return m;
}

double gnmt(size_t len, double alpha) { return std::pow((5.0 + static_cast<double>(len)) / 6.0, alpha); }

}  // namespace

TEST(TranslateDecoding, BeamOneIsGreedy) {
  const Sentences s = number_sentences("fr", 12);
  for (uint64_t seed : {1, 2, 3}) {
    auto m = random_model(s, seed);
    for (bool cache : {true, false}) {
      DecodeOptions d;
      d.max_len = 24;
      d.use_cache = cache;
      for (const Tensor& src : s.sources) {
        const Hypothesis g = greedy_decode(*m, src, Tensor(), d)[0];
        const Hypothesis b = beam_search(*m, src, Tensor(), d, {1, 0.6})[0];
        EXPECT_EQ(b.tokens, g.tokens);
        EXPECT_NEAR(b.log_prob, g.log_prob, 1e-9);
      }
    }
  }
}

TEST(TranslateDecoding, BeamNeverScoresBelowGreedy) {
  int64_t ended = 0, better = 0, total = 0;
  for (const std::string lang : {"fr", "de"}) {
    const Sentences s = number_sentences(lang, 10);
    for (uint64_t seed : {4, 5}) {
      auto m = random_model(s, seed);
      DecodeOptions d;
      d.max_len = 24;
      for (const Tensor& src : s.sources) {
        const Hypothesis g = greedy_decode(*m, src, Tensor(), d)[0];
        for (int64_t k : {2, 4}) {
          for (double alpha : {0.0, 0.6}) {
            const Hypothesis b = beam_search(*m, src, Tensor(), d, {k, alpha})[0];
            ++total;
            // Both ended with <eos>: the teacher-forced score (which includes <eos>) is the model's.
            if (static_cast<int64_t>(g.tokens.size()) >= d.max_len || static_cast<int64_t>(b.tokens.size()) >= d.max_len)
              continue;
            ++ended;
            const std::vector<double> lp = {sequence_log_prob(*m, src, Tensor(), {g.tokens}, d)[0],
                                            sequence_log_prob(*m, src, Tensor(), {b.tokens}, d)[0]};
            EXPECT_NEAR(lp[1], b.log_prob, 1e-4) << "beam's own log_prob disagrees with the teacher-forced one";
            const double gs = lp[0] / gnmt(g.tokens.size() + 1, alpha), bs = lp[1] / gnmt(b.tokens.size() + 1, alpha);
            EXPECT_GE(bs, gs - 1e-6) << lang << " seed " << seed << " beam " << k << " alpha " << alpha;
            better += bs > gs + 1e-6;
          }
        }
      }
    }
  }
  // The comparison is not vacuous: most runs end, and beam search often finds a better sequence.
  EXPECT_GT(ended, total / 2);
  EXPECT_GT(better, 0);
}
