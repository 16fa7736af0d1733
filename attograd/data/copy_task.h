// The copy task: the target is the source (or, with reverse, the source
// reversed). A classic first test of a sequence-to-sequence model.
//
// CopyTaskDataset is counter-based: example i comes from a Generator seeded
// with mix_seed(seed, i), so it needs no storage, get(i) is a pure function of
// (options, i), `size` may be huge (an "infinite" stream for shuffle=false
// loaders), and a held-out set is the same options with another seed.
// Symbol k (0 <= k < num_symbols) has vocab id kNumSpecials + k = 4 + k.
//
// Held-out overlap. A random sequence of length L over V symbols is one of
// V^L, so with n_L training examples of that length a held-out example of
// length L is also a training example with probability about
// 1 - (1 - V^-L)^n_L <= n_L / V^L. That is negligible for long sequences and
// near 1 for short ones (V = 10, L = 2: only 100 sequences). For a finite
// training set, find_overlap() lists the shared examples and
// make_disjoint_heldout() draws a held-out set that avoids them exactly; for
// an unbounded training stream only the bound above applies.
#pragma once
#include <string>

#include <attograd/data/dataset.h>
#include <attograd/data/vocab.h>

namespace attograd {

// The copy task's alphabet, lengths, direction, seed and size.
struct CopyTaskOptions {
  int64_t num_symbols = 10;  // alphabet size V >= 1
  int64_t min_len = 1;       // sequence length, uniform in [min_len, max_len]
  int64_t max_len = 10;      // longest sequence length, >= min_len
  bool reverse = false;      // target = reversed source
  uint64_t seed = 0;         // example i comes from mix_seed(seed, i); another seed, another set
  int64_t size = 10000;      // number of examples
};

// Random symbol sequences whose target is the source (or its reverse); example
// i is a pure function of (seed, i), generated on demand.
class CopyTaskDataset : public Dataset {
 public:
  // ValueError for num_symbols < 1, min_len < 1, min_len > max_len or size < 0.
  explicit CopyTaskDataset(CopyTaskOptions options);
  // options.size.
  int64_t size() const override { return options_.size; }
  Example get(int64_t i) const override;
  // The options given.
  const CopyTaskOptions& options() const { return options_; }

 private:
  CopyTaskOptions options_;
};

// Readable name of symbol k: "a".."z", then "A".."Z", then "0".."9", then "s<k>".
std::string copy_symbol_name(int64_t k);
// Specials plus the num_symbols symbol names, so symbol k has id 4 + k.
Vocab copy_task_vocab(int64_t num_symbols);

// Indices of held-out examples whose (src, tgt) also occurs in `train`.
// `train` must be finite: it is indexed in memory (ValueError above 2^26).
std::vector<int64_t> find_overlap(const Dataset& train, const Dataset& heldout);

// A held-out set of heldout.size examples drawn from CopyTaskDataset(heldout)
// (in index order) skipping every example that occurs in `train` or earlier
// in the held-out set, so it is disjoint from train and has no duplicates.
// ValueError when too few unseen sequences exist (the hint says what to raise).
VectorDataset make_disjoint_heldout(const Dataset& train, const CopyTaskOptions& heldout);

}  // namespace attograd
