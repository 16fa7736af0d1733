// Experiment 6 of the heads study: grouped-query attention as the KV-cache
// lever (Shazeer 2019, Ainslie et al. 2023). H query heads with G K/V heads
// in the decoder, each G trained from scratch and, for G < H, converted from
// the multi-head model of the same seed (K/V projections mean-pooled) and then
// "uptrained" for a small share of its steps. Every model is scored on
// quality and on what its KV cache costs. See docs/heads-study.md.
//
// Shape legend: B batch, S source length, t decoded length, E model width,
// H query heads, G K/V heads, D = E / H head width, L decoder layers, V vocab.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "examples/heads_study/study.h"

namespace attograd::app::heads {

struct GqaOptions {
  int64_t heads = 8;                        // H; every G divides it, G = H is the uptraining source
  std::vector<int64_t> groups = {1, 2, 8};  // G, K/V heads of the decoder's self- and cross-attention
  int64_t seeds = 2;
  double uptrain_fraction = 0.05;           // of the study's training steps (Ainslie et al.: 5%)
  std::vector<int64_t> lengths = {64, 256};  // t of the cache and timing columns
  int64_t batch = 16;                       // B sequences decoded together
  int64_t repeats = 3;                      // timing: the median of this many decodes
  int64_t logit_sentences = 64;             // test sentences of the teacher-forced vs cached logits check
};

// The cache of one model after decoding t steps for a batch of B sources.
struct CacheCost {
  int64_t t = 0;
  size_t bytes_used = 0, bytes_formula = 0, bytes_allocated = 0;  // formula: 2·L·B·(t + S)·G·D·4
  double ms_per_token = 0;  // greedy decoding with the cache, per step (median over repeats)
};

// One scored model.
struct GqaResult {
  std::string lang;
  std::string how;  // "scratch", "converted" (mean-pooled from MHA, no training) or "uptrained"
  int64_t heads = 0, kv_heads = 0;
  uint64_t seed = 0;
  int64_t steps = 0;  // training steps of this model (uptrained: the uptraining steps only)
  double exact_match = 0, bleu = 0, loss = 0;  // test split, greedy decoding; percent / BLEU-4 / per token
  std::vector<CacheCost> cache;
  // max |teacher-forced logit − cached incremental logit| over the non-pad
  // target positions of GqaOptions::logit_sentences test sentences, and the
  // largest |logit| there (the scale the difference is read against).
  double max_logit_diff = 0, max_abs_logit = 0;
};

// Teacher-forced logits against the cached incremental step's (the lean
// decode step when it applies) on the first n examples of data:
// {max |difference|, max |logit|} over the non-pad target positions.
std::pair<double, double> teacher_forced_vs_cached(Seq2SeqTransformer& model, const VectorDataset& data, int64_t n);

// "gqa fr: 6 models × 600 steps, 4 uptrainings × 30 steps: ≈ 4.0 core-minutes" (at the
// study model's measured 1-thread step time per language).
std::string gqa_plan(const StudyOptions& o, const GqaOptions& g, const std::string& lang);

// Trains and scores every model of the experiment for corpus's language;
// writes gqa-<lang>.md and gqa-<lang>.jsonl into o.out_dir; returns the results.
std::vector<GqaResult> gqa_study(const StudyOptions& o, const GqaOptions& g, const Corpus& corpus);

// The study model's training step time at 1 thread, in seconds (fr ≈ 0.06, de ≈ 0.14;
// README timings), for the plans the modes print.
double seconds_per_step(const std::string& lang);

}  // namespace attograd::app::heads
