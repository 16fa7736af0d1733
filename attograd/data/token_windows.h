// A language model's data: a text file tokenized once into a compact id
// array, cut into a training head and a held-out tail, read as windows of
// T + 1 consecutive tokens (input = the first T, target = the last T).
//
// Shape legend: B batch, T context (window length − 1).
// Memory: the file's bytes while it is tokenized, then 4 bytes per token
// (a char model of a 100 MB file peaks near 500 MB).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <attograd/autograd/generator.h>
#include <attograd/autograd/tensor.h>

namespace attograd {

// B windows of T + 1 tokens, split into the model's input and its
// next-token target.
struct LMBatch {
  Tensor input;   // [B, T] i64
  Tensor target;  // [B, T] i64, input shifted left by one
};

// A tokenized text: a training head and a held-out tail, read as windows of
// context + 1 consecutive tokens (random ones for training, consecutive
// non-overlapping ones for evaluation).
class TokenWindows {
 public:
  // The last heldout_fraction of the tokens are held out. ValueError (with a
  // hint) when either part is shorter than one window of context + 1 tokens.
  TokenWindows(std::vector<int32_t> ids, int64_t context, double heldout_fraction);

  // B windows starting at uniformly random offsets of the training part.
  LMBatch sample(int64_t batch, Generator& gen) const;
  // How many consecutive non-overlapping windows the held-out part holds.
  int64_t heldout_windows() const;
  // The held-out part's windows [first, first + count) as input, target
  // [count, T]; IndexError when they are outside [0, heldout_windows()).
  LMBatch heldout_batch(int64_t first, int64_t count) const;

  // T: the tokens of an input (a window holds T + 1).
  int64_t context() const { return context_; }
  // Tokens in the training part (the head of ids()).
  int64_t train_tokens() const { return split_; }
  // Tokens in the held-out part (the tail of ids()).
  int64_t heldout_tokens() const { return static_cast<int64_t>(ids_.size()) - split_; }
  // Every token of the text, the training part first.
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  LMBatch windows(const std::vector<int64_t>& starts) const;
  std::vector<int32_t> ids_;
  int64_t context_, split_;
};

}  // namespace attograd
