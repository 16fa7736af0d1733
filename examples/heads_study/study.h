// The heads study: what does the number of attention heads buy on the
// number-translation task, what do the heads learn, and what does the KV
// cache keep? See docs/heads-study.md for a full run and its conclusions.
//
// Shape legend: B batch, S source length, T target length, E model width,
// H heads, D = E / H head width, F feed-forward width, V target vocab.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "examples/common/translation.h"
#include "examples/heads_study/head_stats.h"

namespace attograd::app::heads {

struct StudyOptions {
  std::string data_dir = "data/numbers";
  std::string out_dir = "runs/heads";
  std::vector<std::string> langs = {"fr", "de"};
  std::vector<int64_t> heads = {1, 2, 4, 8, 16};
  int64_t seeds = 3;
  TransformerConfig model;     // d_model fixed across the grid; heads varies
  TrainOptions training;       // a fixed step budget for every run
  int64_t eval_size = 500;     // test sentences greedy-decoded per run
  int64_t inspect_heads = 4;   // the model whose heads are inspected (one per language)
  int64_t ablation_size = 256; // test sentences for the head ablation losses
  int64_t roles_size = 2000;   // test sentences with gold alignments in the role study (roles.h)
  std::vector<std::string> picture_inputs = {"seventy-one thousand", "seventy-one thousand and seventy-one"};
  std::vector<int64_t> kv_lengths = {16, 32, 64, 128, 256};
  int64_t kv_batch = 16;
  int64_t kv_repeats = 3;
  std::vector<int64_t> kv_groups = {4};  // K/V heads G benchmarked (each divides inspect_heads)
  // Experiments 1-3 (curves.h): learning curves, the constant-D axis, the composition split.
  std::map<std::string, int64_t> steps_per_lang;  // a language's step budget; others train training.steps
  int64_t curve_every = 50;   // steps between learning-curve points
  int64_t curve_size = 200;   // valid sentences per point (teacher-forced loss and token accuracy)
  int64_t head_width = 16;    // D of the constant-D axis (E = H·D, F = 4E)
  std::vector<int64_t> width_heads = {1, 2, 4, 8};
  std::vector<std::string> width_langs = {"fr"};  // languages trained on the constant-D axis too
  int64_t timing_rounds = 5;  // interleaved rounds of the step-time measurement
  int64_t timing_steps = 10;  // training steps timed per model and round

  int64_t steps_for(const std::string& lang) const {
    const auto it = steps_per_lang.find(lang);
    return it == steps_per_lang.end() ? training.steps : it->second;
  }
};

// One point of a learning curve: teacher-forced loss and token accuracy (%)
// on the first curve_size valid sentences after `step` training steps.
struct CurveSample {
  int64_t step = 0;
  double loss = 0, token_accuracy = 0;
};

// One trained model of the grid.
struct RunResult {
  std::string lang;
  int64_t heads = 0, head_width = 0, d_model = 0, d_ff = 0, steps = 0;
  uint64_t seed = 0;
  double exact_match = 0, token_accuracy = 0, bleu = 0, loss = 0;  // on the test split
  double gen_exact_match = 0, gen_bleu = 0;  // on the composition split (gen.tsv), greedy
  std::vector<CurveSample> curve;
  double step_ms = 0;           // mean training step time (forward, backward, AdamW)
  int64_t parameters = 0;
  double train_flops_per_token = 0;  // see flops_per_target_token
};

// The corpus of one language, tokenized once for every run.
struct Corpus {
  Translator translator;
  VectorDataset train, test, valid, gen;  // gen: the composition split (thousands groups unseen in training)
};
Corpus load_corpus(const std::string& data_dir, const std::string& lang);

// Training FLOPs per target token (3x the forward matmul FLOPs: forward,
// then backward to inputs and weights), from mean lengths S and T (with
// EOS/BOS) and no padding:
//   encoder layer, per sequence: S(8E² + 4EF) + 4S²E
//   decoder layer, per sequence: T(4E² + 4rE² + 4E² + 4EF) + 4rSE² + 4T²E + 4TSE
//   output layer: 2TEV
// with r = G/H, the decoder's share of K/V heads (1 for MHA): its K and V
// projections are E x (G·D) = E x rE. Attention costs 4·L·L'·E whatever H
// and G are: heads split E and queries keep their H heads, so the score and
// weighted-sum GEMMs do not shrink with G.
double flops_per_target_token(const TransformerConfig& c, double mean_src, double mean_tgt);

// Trains one model of the grid (o.steps_for its language, a learning-curve
// point every o.curve_every steps) and scores it on the test and gen splits;
// `keep` (if given) receives the model.
RunResult train_run(const StudyOptions& o, const Corpus& corpus, int64_t heads, uint64_t seed,
                    std::unique_ptr<Seq2SeqTransformer>* keep = nullptr);

// heads.md (mean ± std per language and H), results.jsonl, heads.svg.
void write_grid_report(const StudyOptions& o, const std::vector<RunResult>& runs);

// Per-head entropy, distance, ablation and alignment for one trained model,
// plus attention pictures for o.picture_inputs; writes inspect-<lang>.md and
// inspect-<lang>/ (SVGs + index.html). `what` names the model in the title.
// Returns the Markdown.
std::string inspect_model(const StudyOptions& o, const Corpus& corpus, Seq2SeqTransformer& model,
                          const std::string& what);

// Teacher-forcing batches of the first n examples of a split, batch_size per batch.
std::vector<AblationBatch> first_batches(const VectorDataset& data, int64_t n, int64_t batch_size = 64);

// One point of a pruning curve: the model with `removed` of its heads
// removed (AttentionCall::head_scale 0), scored on o.eval_size test sentences.
struct PruningPoint {
  std::string order;   // "importance", "ablation" or "random": which heads go first
  int64_t removed = 0;
  double fraction = 0;  // removed / all heads of all attention modules
  double exact_match = 0, bleu = 0;  // greedy decoding, percent / BLEU-4
};

// One model's pruning curves: the three orders in turn, each from 0 removed heads.
struct PruningRun {
  uint64_t seed = 0;
  int64_t total_heads = 0;     // of all attention modules
  int64_t modules = 0;         // attention modules
  int64_t step = 0;            // heads removed per point
  double baseline_loss = 0;    // teacher-forced, on the ablation sentences
  std::vector<PruningPoint> points;
};

// Iterative pruning (Michel et al. 2019, §5): heads are removed about 10% of
// all heads at a time, up to 90%, in three orders: by importance (head_importance
// over single sentences, normalized per module, recomputed on the remaining heads
// after every step, as Michel does), by ablation Δ loss (ablate_heads on the full model, once)
// and at random (Generator(seed)). Importance and ablation are measured on the first
// o.ablation_size training sentences, so the test sentences only score.
PruningRun pruning_curves(const StudyOptions& o, const Corpus& corpus, Seq2SeqTransformer& model, uint64_t seed);

// pruning-<lang>.md: per order and number of heads removed, the mean exact
// match and BLEU over the models with a 95% bootstrap interval over their
// seeds (the bare value for one model); pruning-<lang>.jsonl: every model's
// points. ValueError when runs is empty or the models differ in shape.
void write_pruning_report(const StudyOptions& o, const Corpus& corpus, int64_t heads,
                          const std::vector<PruningRun>& runs);

// Greedy decoding of o.kv_batch test sources to each length in o.kv_lengths,
// with and without the KV cache, for each K/V head count G in o.kv_groups:
// ms per step, speedup, identical outputs, the cache's bytes used against its
// formula 2·L·B·(t + S)·G·D·4, and its bytes allocated (capacity doubling).
// Writes kv-bench.md; returns it.
std::string kv_bench(const StudyOptions& o, const Corpus& corpus);

// Converts a translate checkpoint's model file to grouped-query attention
// with kv_heads K/V heads (to_grouped_query: the decoder's K/V projections
// mean-pooled, Ainslie et al. 2023) and writes it to `out`, a
// *.model.safetensors file with the same metadata (task, vocabularies, step)
// and the new config. Returns a one-line summary.
std::string convert_to_grouped_query(const std::string& checkpoint, int64_t kv_heads, const std::string& out);

}  // namespace attograd::app::heads
