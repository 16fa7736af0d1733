// Head roles (experiments 4 and 5 of the heads study, docs/heads-study.md):
//   - per-head alignment accuracy against gold alignments (alignment.h) over
//     the whole test split, the Clark et al. (2019) / Voita et al. (2019)
//     protocol with exact labels: a target token counts as aligned when the
//     head's largest weight, in the decoder row that predicts the token, is on
//     one of its gold source tokens; against a monotone-diagonal and the best
//     fixed-offset baseline; per role, with 95% bootstrap intervals over
//     sentences, and the roles that get a dedicated head;
//   - per-head scores: importance (Michel et al. 2019: mean |∂L/∂ξ_h|) and a
//     Fisher-style score (mean (∂L/∂ξ_h)²), both per held-out sentence,
//     single-head ablation Δ loss, entropy and confidence, and Spearman
//     correlations between them, with bootstrap intervals over sentences;
//   - heads matched across seeds by their role-accuracy vectors.
//
// Shape legend: B batch, H heads, T target length, S source length.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "examples/heads_study/alignment.h"
#include "examples/heads_study/study.h"

namespace attograd::app::heads {

// Index of "content" in the per-role arrays: every token but connectors and <eos>.
inline constexpr int kContent = kRoleCount;
inline constexpr int kRoleSlots = kRoleCount + 1;
// role_name, and "content" for kContent.
std::string role_slot_name(int slot);

struct Estimate {
  double value = 0, lo = 0, hi = 0;  // the statistic on all sentences, and its 95% bootstrap interval
};

// Resamples of n sentences with replacement (seeded; the same draws for
// every statistic, so intervals of different heads are paired).
class SentenceBootstrap {
 public:
  SentenceBootstrap(int64_t sentences, int64_t resamples, uint64_t seed);
  // Σ num / Σ den over the sentences (0 when Σ den is 0), with its 95% percentile interval.
  Estimate ratio(const std::vector<double>& num, const std::vector<double>& den) const;
  // Any statistic of a sample (sentence indices, repeats as drawn); value on all sentences once each.
  Estimate interval(const std::function<double(const std::vector<int64_t>&)>& statistic) const;
  // A vector of statistics of one sample at once (every head's score, say): one interval each.
  std::vector<Estimate> intervals(const std::function<std::vector<double>(const std::vector<int64_t>&)>& statistic) const;

 private:
  int64_t n_;
  std::vector<std::vector<int64_t>> draws_;
};

// Spearman's rank correlation (ties get their mean rank); 0 when either side is constant.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

// The gold-aligned sentences of a split (at most `limit`): each row's number
// spelled by align_number and checked against the row's English and target
// text; an Error naming the file line when they differ.
std::vector<AlignedSentence> gold_split(const std::string& data_dir, const std::string& split, const std::string& lang,
                                        int64_t limit);

// Per sentence, how many tokens of each role slot a predictor aligns correctly.
struct RoleCounts {
  std::array<double, kRoleSlots> hits{}, tokens{};
};
// predict(sentence, t): the source position chosen for target token t.
std::vector<RoleCounts> score_alignment(const std::vector<AlignedSentence>& gold,
                                        const std::function<int64_t(size_t sentence, size_t t)>& predict);

// One cross-attention head: argmax source position for every target token,
// teacher-forced on the gold target ([sentence][t]).
struct HeadArgmax {
  std::string module;
  int64_t layer = 0, head = 0;
  std::vector<std::vector<int64_t>> argmax;
};
std::vector<HeadArgmax> cross_attention_argmax(Seq2SeqTransformer& model, const Translator& tr,
                                               const std::vector<AlignedSentence>& gold);

struct HeadRoles {
  std::string module;
  int64_t layer = 0, head = 0;
  std::array<Estimate, kRoleSlots> accuracy;  // percent of the slot's tokens aligned
  std::vector<int> dedicated;                 // role slots this head is dedicated to
};

struct AlignmentBaselines {
  std::array<Estimate, kRoleSlots> diagonal, offset;  // percent
  std::array<int64_t, kRoleSlots> best_offset{};      // s = t + k, the k that scores best per slot
  std::array<double, kRoleSlots> tokens{};            // tokens per slot over the split
};

// A head is dedicated to a role when the lower end of its interval is at
// least 10 points above both baselines and its accuracy on the role is at
// least 10 points above its accuracy on the other content tokens (Voita et
// al.'s margin over the positional baseline).
inline constexpr double kDedicatedMargin = 10.0;

struct HeadScore {  // experiment 4, one head of any attention module
  std::string module;
  int64_t head = 0;
  Estimate importance, fisher, ablation, entropy, confidence;
};

struct ScoreCorrelation {
  std::string a, b;
  Estimate rho;  // Spearman over all heads, bootstrap over sentences
};

// Importance measured four ways, ranked against ablation Δ: which of the
// pruning section's two choices (training data, batches of 64) makes it
// rank heads poorly.
struct ImportanceControl {
  std::string data;        // "valid" or "train"
  int64_t batch = 0;       // sentences per gradient: 1 or 64
  double rho_ablation = 0; // Spearman over all heads against ablation Δ
};

struct ModelRoles {
  uint64_t seed = 0;
  int64_t heads = 0;       // H of the model
  double exact_match = 0;  // percent, greedy, as train_run measured it (set by the caller)
  int64_t sentences = 0, scored_sentences = 0;  // test sentences aligned; valid sentences scored
  AlignmentBaselines baselines;
  std::vector<HeadRoles> cross;
  std::vector<HeadScore> scores;
  std::vector<ScoreCorrelation> correlations;
  std::vector<ImportanceControl> controls;
};

// Both experiments on one trained model: alignment on `test` (gold), scores
// on the first o.ablation_size sentences of `valid`, and the importance
// controls on as many of `valid` and `train`.
ModelRoles analyse_roles(const StudyOptions& o, const Translator& tr, Seq2SeqTransformer& model,
                         const std::vector<AlignedSentence>& test, const VectorDataset& valid,
                         const VectorDataset& train, uint64_t seed);

// The permutation p of [0, n) with the least Σ cost[i][p[i]] (cost is n x n,
// n <= 8, searched exhaustively).
std::vector<int64_t> best_matching(const std::vector<std::vector<double>>& cost);

// roles-<lang>.md and roles-<lang>.jsonl for the models of one language
// (one per seed): tables, dedicated heads, and the cross heads of every seed
// matched to seed 1's within each layer by their role-accuracy vectors.
// Returns the Markdown.
std::string write_roles_report(const StudyOptions& o, const std::string& lang, const std::vector<ModelRoles>& models);

// One trained model of the role study.
struct RoleModel {
  uint64_t seed = 0;
  std::unique_ptr<Seq2SeqTransformer> model;
};

// Experiments 4 and 5 on trained models of one language (one per seed):
// gold alignments on the first o.roles_size test sentences, scores on the
// first o.ablation_size validation sentences, exact match on o.eval_size
// test sentences; writes roles-<lang>.md and .jsonl. Returns the Markdown.
std::string roles_study(const StudyOptions& o, const Corpus& corpus, const std::vector<RoleModel>& models);

}  // namespace attograd::app::heads
