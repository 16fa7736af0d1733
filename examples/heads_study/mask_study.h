// Experiment 7 of the heads study: what the decoder's causal mask costs and
// what it is for. (a) The share of the fused attention kernel's score work
// that falls on masked positions, counted and timed; (b) the same model
// trained with and without the mask (TransformerConfig::causal_decoder):
// without it the teacher-forced loss falls, because each position can read
// the token it must predict, and greedy decoding, which has no future to
// read, fails. See docs/heads-study.md.
//
// Shape legend: B batch, H heads, T target length (= S, the keys of
// self-attention), D head width.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "examples/heads_study/study.h"

namespace attograd::app::heads {

struct MaskOptions {
  int64_t heads = 4;                         // H of the trained pair
  int64_t steps = 600;                       // training steps of each model of the pair (the grid's budget)
  std::vector<int64_t> lengths = {16, 64, 256};  // T of the score-work rows
  int64_t batch = 16, timing_heads = 4, head_width = 16;  // B, H, D of the timed attention calls
  int64_t repeats = 5;                       // timing: the median of this many calls, causal and full interleaved
};

// The score work of one causal self-attention call of length T.
struct MaskWork {
  int64_t T = 0;
  int64_t computed = 0;  // scores the fused kernel computes per head: T·T (its GEMM fills the whole matrix)
  int64_t needed = 0;    // scores a causal row needs per head: T(T + 1)/2
  double wasted = 0;     // (computed − needed) / computed = (T − 1) / 2T
  double ms_causal = 0, ms_full = 0;  // forward + backward of the fused op, is_causal on / off
};
// Counts and times the score work at each of m.lengths.
std::vector<MaskWork> mask_work(const MaskOptions& m);

// One model of the trained pair, on the test split.
struct MaskRun {
  bool causal = true;
  double loss = 0, token_accuracy = 0;  // teacher forcing, per target token / percent
  double exact_match = 0, bleu = 0;     // greedy decoding (with the cache)
};

// "mask fr: 2 models x 300 steps: about 0.6 core-minutes ..."
std::string mask_plan(const MaskOptions& m, const std::string& lang);

// Both parts; writes mask-<lang>.md and mask-<lang>.jsonl into o.out_dir.
// Returns the Markdown.
std::string mask_study(const StudyOptions& o, const MaskOptions& m, const Corpus& corpus);

}  // namespace attograd::app::heads
