// Decoding a Seq2SeqTransformer: greedy and beam search, with or without the KV cache.
//
// Shape legend: B batch, S source length, L output length (≤ max_len), V target vocab.
//   src [B, S] i64, src_key_padding_mask [B, S] b8 (true at padding) -> B token sequences
// Each output sequence stops at EOS (not included) or at max_len tokens.
#pragma once
#include <cstdint>
#include <vector>

#include <attograd/nn/transformer.h>

namespace attograd {

// Length limit and special tokens of a decode.
struct DecodeOptions {
  int64_t max_len = 64;  // most tokens generated per sequence (EOS excluded); must be in [1, model max_len)
  // Token id fed as the first decoder input.
  int64_t bos_id = 1, eos_id = 2;  // token id that ends a sequence (not included in the output)
  bool use_cache = true;  // false: re-run the decoder on the whole prefix each step
  // With the cache, each token goes through Seq2SeqTransformer::decode_step
  // (no graph, no attention observers); false feeds it through the graph's
  // decode() with the same cache, so an attention observer (head masks,
  // attention pictures) sees every call.
  bool use_decode_step = true;
};

// One decoded sequence and its score.
struct Hypothesis {
  std::vector<int64_t> tokens;  // without BOS/EOS
  double log_prob = 0;          // Σ log p(token) including EOS when reached
  double score = 0;             // log_prob / length_penalty (beam search ranks by it)
};

// Greedy: at each step the argmax token. Runs in eval mode under NoGradGuard.
std::vector<Hypothesis> greedy_decode(Seq2SeqTransformer& model, const Tensor& src, const Tensor& src_key_padding_mask,
                                      const DecodeOptions& opt = {});

// Beam width and length penalty of beam_search.
struct BeamOptions {
  int64_t beam = 4;  // hypotheses kept per batch element at each step; 1 equals greedy
  // Hypotheses are ranked by log_prob / ((5 + len) / 6)^alpha (GNMT); alpha 0 ranks by log_prob.
  double length_penalty = 0.6;
};

// Beam search per batch element; beam 1 equals greedy.
std::vector<Hypothesis> beam_search(Seq2SeqTransformer& model, const Tensor& src, const Tensor& src_key_padding_mask,
                                    const DecodeOptions& opt, const BeamOptions& beam);

// Σ log p of a given output sequence (teacher-forced, with EOS), per example:
// the model score that beam search maximises.
std::vector<double> sequence_log_prob(Seq2SeqTransformer& model, const Tensor& src, const Tensor& src_key_padding_mask,
                                      const std::vector<std::vector<int64_t>>& outputs, const DecodeOptions& opt = {});

}  // namespace attograd
