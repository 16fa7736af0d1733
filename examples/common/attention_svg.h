// The example programs' shared code (namespace attograd::app, never installed), not the library.
// Attention pictures: one SVG heatmap per layer, head and attention kind
// (encoder self, decoder self, cross; a GPT's causal self-attention), with the
// tokens as axis labels, plus an index.html showing them all.
//
// Shape legend: H heads, S source length (with <eos>), T decoder length
// (<bos> + output). Weights come from one teacher-forced forward of the
// source and the decoded output, seen by an observer on every attention module:
//   encoder self [1, H, S, S], decoder self [1, H, T, T], cross [1, H, T, S].
// A GPT's causal self-attention over a text of T tokens: [1, H, T, T] per block.
// Rows are queries, columns keys; a decoder row is labelled with its input
// token (<bos>, y1, ...): that position predicts the next token.
#pragma once
#include <string>
#include <vector>

#include <attograd/data/vocab.h>
#include <attograd/nn/gpt.h>
#include <attograd/nn/transformer.h>

namespace attograd::app {

struct AttentionMap {
  std::string kind;  // "enc-self", "dec-self", "cross" or "causal-self" (a GPT's)
  int64_t layer = 0, head = 0;
  std::vector<std::string> rows, cols;  // query / key token labels
  std::vector<float> weights;           // [rows, cols], each row sums to 1
};

struct AttentionPictures {
  std::vector<AttentionMap> maps;  // by kind, then layer, then head
};

// src [1, S] i64 (ending in <eos>), src_tokens its S labels; output: the decoded ids (no BOS/EOS).
AttentionPictures draw_attention(Seq2SeqTransformer& model, const std::vector<std::string>& src_tokens,
                                 const Tensor& src, const std::vector<int64_t>& output, const Vocab& tgt_vocab);

// ids [1, T] i64 with its T token labels: every block's causal self-attention
// ("causal-self", layer = block) in one forward of the text.
AttentionPictures draw_lm_attention(GPT& model, const std::vector<std::string>& tokens, const Tensor& ids);

// One map as a standalone SVG document.
std::string attention_svg(const AttentionMap& map);

// Writes <kind>-L<layer>-H<head>.svg for every map and index.html into dir
// (created if missing), headed "source → translation" (just source when
// translation is empty); IOError when a file cannot be written.
void write_attention_pictures(const AttentionPictures& pictures, const std::string& dir, const std::string& source,
                              const std::string& translation);

}  // namespace attograd::app
