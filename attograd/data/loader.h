// DataLoader: seeded shuffling, batching and padding of a Dataset.
//
// Shape legend: B batch size, S longest source in the batch (+1 for <eos>),
// T longest target in the batch (+1 for <eos>/<bos>).
//
// Collate. For an example {src, tgt} (raw ids, see attograd/data/dataset.h):
//   source   = src + [<eos>]                  (the encoder sees where the input ends)
//   target   = tgt + [<eos>]
//   tgt_in   = [<bos>] + target[:-1]  = [<bos>] + tgt     (decoder input, teacher forcing)
//   tgt_out  = target                 = tgt + [<eos>]     (what the decoder must predict)
// Rows are right-padded with pad_id to the longest row of the batch. The loss
// takes tgt_out with ignore_index = pad_id.
//
// Order. Epoch e visits the examples in a permutation that is a pure function
// of (seed, e): a Generator seeded with mix_seed(seed, e) drives a
// Fisher-Yates shuffle (identity order when shuffle is off). Batch p of epoch
// e is therefore fixed, and restoring a LoaderState {epoch, position}
// reproduces the remaining batches exactly.
//
// Token budget (max_tokens > 0, fairseq's --max-tokens). Sentences of real
// text vary in length, and a batch pads every row to its longest, so rows of
// similar length go together: the examples sorted by length L = max(|src|,
// |tgt|) + 1 (ties by index) are cut, in that order, into batches whose rows ×
// longest L stays within max_tokens. The batches are made once; epoch e visits
// them in the permutation above (of batches, not examples), so every batch
// holds sentences of about one length and the step's work stays near the budget.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <attograd/autograd/tensor.h>
#include <attograd/data/dataset.h>
#include <attograd/data/vocab.h>

namespace attograd {

// One padded batch (see the collate rules above).
struct Batch {
  Tensor src;                   // [B, S] i64, pad_id where padded
  Tensor tgt_in;                // [B, T] i64, <bos> + tgt, pad_id where padded
  Tensor tgt_out;               // [B, T] i64, tgt + <eos>, pad_id where padded
  Tensor src_key_padding_mask;  // [B, S] b8, true at padding
  Tensor tgt_key_padding_mask;  // [B, T] b8, true at padding
  Tensor causal_mask;           // [T, T] b8, true above the diagonal (attention not allowed)
  int64_t num_tokens = 0;       // non-pad entries of tgt_out
  std::vector<int64_t> indices; // dataset index of each row
  // Rows in the batch (B).
  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

// The ids collate pads, starts and ends sequences with.
struct SpecialIds {
  int64_t pad = kPadId;  // fills rows up to the batch's longest
  int64_t bos = kBosId;  // starts each tgt_in row
  int64_t eos = kEosId;  // ends each source and tgt_out row
};

// Pads and stacks examples into a Batch (see the header comment); writes
// straight into tensor storage. `indices` (one per example, or empty) is
// copied into Batch::indices. ValueError on an empty list or a negative id.
Batch collate(const std::vector<Example>& examples, const SpecialIds& ids = {},
              std::vector<int64_t> indices = {});

// [T, T] b8: true at (i, j) with j > i, the positions a causal decoder must not see.
Tensor causal_mask(int64_t t);

// Batch size, shuffling, seed and special ids of a DataLoader.
struct LoaderOptions {
  int64_t batch_size = 32;  // examples per batch (the last may be smaller), >= 1; unused with max_tokens
  // > 0: batches by a token budget (see the file comment): rows × longest row
  // (source or target, +1 for <eos>) at most max_tokens. 0: batch_size rows.
  int64_t max_tokens = 0;
  bool shuffle = true;      // a fresh seeded permutation each epoch; off: dataset order
  bool drop_last = false;  // drop the last, smaller batch of each epoch
  uint64_t seed = 0;        // epoch e's order comes from mix_seed(seed, e)
  int64_t pad_id = kPadId;  // fills rows up to the batch's longest (SpecialIds::pad)
  int64_t bos_id = kBosId;  // starts each tgt_in row (SpecialIds::bos)
  int64_t eos_id = kEosId;  // ends each source and tgt_out row (SpecialIds::eos)
};

// Where the next batch comes from: batch `position` of epoch `epoch`.
struct LoaderState {
  int64_t epoch = 0;     // 0-based epoch of the next batch
  int64_t position = 0;  // batches of this epoch already returned
  // Same epoch and position.
  bool operator==(const LoaderState&) const = default;
};

class DataLoader;

// One pass over an epoch, in that epoch's order, independent of the loader's
// own position:  for (const Batch& b : loader.epoch_batches()) ...
class EpochBatches {
 public:
  // Walks the epoch's batches in order.
  class iterator {
   public:
    // The batch at this position (made on demand).
    Batch operator*() const;
    // Moves to the next batch.
    iterator& operator++() { ++position_; return *this; }
    // Same position.
    bool operator==(const iterator& other) const { return position_ == other.position_; }

   private:
    friend class EpochBatches;
    iterator(const EpochBatches* range, int64_t position) : range_(range), position_(position) {}
    const EpochBatches* range_;
    int64_t position_;
  };
  // The epoch's first batch.
  iterator begin() const { return {this, 0}; }
  // Past the epoch's last batch.
  iterator end() const;
  // Batches in the epoch (batches_per_epoch()).
  int64_t size() const;

 private:
  friend class DataLoader;
  EpochBatches(const DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> order)
      : loader_(loader), order_(std::move(order)) {}
  const DataLoader* loader_;
  std::shared_ptr<const std::vector<int64_t>> order_;  // null: identity order
};

// Seeded, resumable batching of a Dataset (see above).
class DataLoader {
 public:
  // The loader keeps a reference: `dataset` must outlive it. ValueError for
  // batch_size < 1, an empty dataset, or drop_last leaving no batch; with
  // max_tokens, also for an example longer than the budget (naming it).
  DataLoader(const Dataset& dataset, LoaderOptions options);
  DataLoader(const Dataset&& dataset, LoaderOptions options) = delete;  // would dangle

  // The batch at the current state; then advances, rolling over to the next
  // epoch after its last batch (so the state always names the next batch).
  Batch next();

  // The epoch of the next batch.
  int64_t epoch() const { return state_.epoch; }
  // Batches of that epoch already returned.
  int64_t position() const { return state_.position; }
  // {epoch, position}: save it to resume exactly here (set_state).
  LoaderState state() const { return state_; }
  // ValueError unless epoch >= 0 and 0 <= position <= batches_per_epoch()
  // (position == batches_per_epoch() means the start of the next epoch).
  void set_state(LoaderState state);

  // ceil(size / batch_size), or floor with drop_last; with max_tokens, the number of token-budget batches.
  int64_t batches_per_epoch() const;
  // Batch `position` of epoch `epoch`; does not move the loader.
  Batch batch_at(int64_t epoch, int64_t position) const;
  // Every batch of epoch `epoch` in order, without moving the loader.
  EpochBatches epoch_batches(int64_t epoch = 0) const;
  // Dataset indices in the order epoch `epoch` visits them.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  // The options given.
  const LoaderOptions& options() const { return options_; }
  // The dataset read (held by reference).
  const Dataset& dataset() const { return dataset_; }

  // Shuffling materializes a permutation; larger datasets (e.g. an unbounded
  // generated one, whose examples are random already) must use shuffle=false.
  static constexpr int64_t kMaxShuffleSize = int64_t{1} << 27;

 private:
  friend class EpochBatches;
  std::shared_ptr<const std::vector<int64_t>> order_for(int64_t epoch) const;  // null: identity
  void plan_token_batches();  // fills by_length_ and bounds_
  Batch make_batch(const std::vector<int64_t>* order, int64_t position) const;

  const Dataset& dataset_;
  LoaderOptions options_;
  // With max_tokens: dataset indices sorted by length, and batch k's rows
  // by_length_[bounds_[k] .. bounds_[k + 1]). Empty otherwise.
  std::vector<int64_t> by_length_;
  std::vector<int64_t> bounds_;
  LoaderState state_;
  std::shared_ptr<const std::vector<int64_t>> order_;  // order of state_.epoch (null: identity)
  int64_t order_epoch_ = 0;                            // the epoch order_ belongs to
};

}  // namespace attograd
