// DataLoader and collate: padding, masks, seeded shuffling, epoch coverage,
// exact resumption from a LoaderState.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include <attograd/data/copy_task.h>
#include <attograd/data/loader.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_error;

namespace {

void expect_i64(const Tensor& t, const Shape& shape, const std::vector<int64_t>& values) {
  ASSERT_EQ(t.dtype(), DType::i64);
  ASSERT_EQ(t.shape(), shape);
  EXPECT_EQ(t.to_vector<int64_t>(), values);
}

void expect_b8(const Tensor& t, const Shape& shape, const std::vector<int>& values) {
  ASSERT_EQ(t.dtype(), DType::b8);
  ASSERT_EQ(t.shape(), shape);
  std::vector<bool> want(values.begin(), values.end());
  EXPECT_EQ(t.to_vector<bool>(), want);
}

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.num_tokens, b.num_tokens);
  for (auto [x, y] : {std::pair{&a.src, &b.src}, {&a.tgt_in, &b.tgt_in}, {&a.tgt_out, &b.tgt_out}}) {
    EXPECT_EQ(x->shape(), y->shape());
    EXPECT_EQ(x->to_vector<int64_t>(), y->to_vector<int64_t>());
  }
  for (auto [x, y] : {std::pair{&a.src_key_padding_mask, &b.src_key_padding_mask},
                      {&a.tgt_key_padding_mask, &b.tgt_key_padding_mask}, {&a.causal_mask, &b.causal_mask}}) {
    EXPECT_EQ(x->shape(), y->shape());
    EXPECT_EQ(x->to_vector<bool>(), y->to_vector<bool>());
  }
}

// Example i: src has i % 4 tokens, tgt has i % 3 + 1 tokens starting with 100 + i.
VectorDataset numbered(int64_t n) {
  VectorDataset d;
  for (int64_t i = 0; i < n; ++i) {
    Example e;
    for (int64_t k = 0; k < i % 4; ++k) e.src.push_back(4 + k);
    e.tgt.push_back(100 + i);
    for (int64_t k = 0; k < i % 3; ++k) e.tgt.push_back(5 + k);
    d.add(e);
  }
  return d;
}

std::vector<int64_t> epoch_indices(DataLoader& loader) {
  std::vector<int64_t> seen;
  const int64_t e = loader.epoch();
  for (int64_t p = 0; p < loader.batches_per_epoch(); ++p) {
    Batch b = loader.next();
    seen.insert(seen.end(), b.indices.begin(), b.indices.end());
  }
  EXPECT_EQ(loader.epoch(), e + 1);
  return seen;
}

}  // namespace

// ---- collate ----------------------------------------------------------------

TEST(Collate, HandMadeBatchExactTensors) {
  std::vector<Example> ex = {{{5, 6, 7}, {8, 9}}, {{5}, {8, 9, 10, 11}}};
  Batch b = collate(ex, {}, {7, 3});
  // S = 3 + 1 (eos), T = 4 + 1.
  expect_i64(b.src, {2, 4}, {5, 6, 7, 2,
                             5, 2, 0, 0});
  expect_b8(b.src_key_padding_mask, {2, 4}, {0, 0, 0, 0,
                                             0, 0, 1, 1});
  expect_i64(b.tgt_in, {2, 5}, {1, 8, 9, 0, 0,
                                1, 8, 9, 10, 11});
  expect_i64(b.tgt_out, {2, 5}, {8, 9, 2, 0, 0,
                                 8, 9, 10, 11, 2});
  expect_b8(b.tgt_key_padding_mask, {2, 5}, {0, 0, 0, 1, 1,
                                             0, 0, 0, 0, 0});
  expect_b8(b.causal_mask, {5, 5}, {0, 1, 1, 1, 1,
                                    0, 0, 1, 1, 1,
                                    0, 0, 0, 1, 1,
                                    0, 0, 0, 0, 1,
                                    0, 0, 0, 0, 0});
  EXPECT_EQ(b.num_tokens, 8);
  EXPECT_EQ(b.indices, (std::vector<int64_t>{7, 3}));
  EXPECT_EQ(b.size(), 2);
}

TEST(Collate, CustomSpecialIdsAndEmptySequences) {
  std::vector<Example> ex = {{{}, {}}, {{4}, {4}}};
  Batch b = collate(ex, SpecialIds{.pad = 9, .bos = 7, .eos = 8});
  expect_i64(b.src, {2, 2}, {8, 9,
                             4, 8});
  expect_b8(b.src_key_padding_mask, {2, 2}, {0, 1,
                                             0, 0});
  expect_i64(b.tgt_in, {2, 2}, {7, 9,
                                7, 4});
  expect_i64(b.tgt_out, {2, 2}, {8, 9,
                                 4, 8});
  expect_b8(b.tgt_key_padding_mask, {2, 2}, {0, 1,
                                             0, 0});
  EXPECT_EQ(b.num_tokens, 3);
  EXPECT_TRUE(b.indices.empty());
}

TEST(Collate, Errors) {
  expect_error<ValueError>([] { collate({}); }, {"collate", "no examples"});
  expect_error<ValueError>([] { collate({{{4, -1}, {4}}}); }, {"collate", "negative id -1", "src position 1"});
  expect_error<ValueError>([] { collate({{{4}, {4}}}, {}, {1, 2}); }, {"collate", "2 indices for 1 examples"});
  expect_error<ValueError>([] { causal_mask(-1); }, {"causal_mask"});
  expect_b8(causal_mask(1), {1, 1}, {0});
}

// ---- order and coverage ---------------------------------------------------

TEST(DataLoader, ShuffleIsSeeded) {
  VectorDataset d = numbered(50);
  DataLoader a(d, {.batch_size = 4, .seed = 1}), b(d, {.batch_size = 4, .seed = 1}), c(d, {.batch_size = 4, .seed = 2});
  EXPECT_EQ(a.epoch_order(0), b.epoch_order(0));
  EXPECT_NE(a.epoch_order(0), c.epoch_order(0));
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
  std::vector<int64_t> identity(50);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(a.epoch_order(0), identity);
  for (int64_t e = 0; e < 3; ++e) {
    std::vector<int64_t> sorted = a.epoch_order(e);
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "epoch " << e << " is not a permutation";
  }
  // next() follows epoch_order across epochs, the same for the same seed.
  for (int64_t e = 0; e < 2; ++e) {
    std::vector<int64_t> ia = epoch_indices(a), ib = epoch_indices(b);
    EXPECT_EQ(ia, a.epoch_order(e));
    EXPECT_EQ(ia, ib);
  }
  DataLoader plain(d, {.batch_size = 4, .shuffle = false});
  EXPECT_EQ(epoch_indices(plain), identity);
  EXPECT_EQ(epoch_indices(plain), identity);
}

TEST(DataLoader, EveryExampleOncePerEpoch) {
  for (int64_t n : {10, 12, 1, 7}) {
    for (int64_t bs : {1, 3, 4, 12}) {
      VectorDataset d = numbered(n);
      DataLoader keep(d, {.batch_size = bs, .seed = 5});
      EXPECT_EQ(keep.batches_per_epoch(), (n + bs - 1) / bs);
      for (int e = 0; e < 2; ++e) {
        std::vector<int64_t> seen;
        for (int64_t p = 0; p < keep.batches_per_epoch(); ++p) {
          Batch b = keep.next();
          const int64_t want = p + 1 < keep.batches_per_epoch() || n % bs == 0 ? bs : n % bs;
          EXPECT_EQ(b.size(), std::min(want, n)) << "n=" << n << " bs=" << bs << " p=" << p;
          seen.insert(seen.end(), b.indices.begin(), b.indices.end());
        }
        std::sort(seen.begin(), seen.end());
        std::vector<int64_t> all(static_cast<size_t>(n));
        std::iota(all.begin(), all.end(), 0);
        EXPECT_EQ(seen, all) << "n=" << n << " bs=" << bs;
      }
      if (bs > n) continue;
      DataLoader drop(d, {.batch_size = bs, .drop_last = true, .seed = 5});
      EXPECT_EQ(drop.batches_per_epoch(), n / bs);
      for (int64_t e = 0; e < 2; ++e) {
        std::vector<int64_t> seen;
        for (int64_t p = 0; p < drop.batches_per_epoch(); ++p) {
          Batch b = drop.next();
          EXPECT_EQ(b.size(), bs);
          seen.insert(seen.end(), b.indices.begin(), b.indices.end());
        }
        std::vector<int64_t> order = drop.epoch_order(e);
        order.resize(static_cast<size_t>(n / bs * bs));  // the dropped ones are the tail of the permutation
        EXPECT_EQ(seen, order);
        EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "duplicate in an epoch";
      }
    }
  }
}

TEST(DataLoader, BatchRowsAreTheDatasetExamples) {
  VectorDataset d = numbered(9);
  DataLoader loader(d, {.batch_size = 4, .seed = 3});
  for (int k = 0; k < 5; ++k) {
    Batch b = loader.next();
    std::vector<Example> ex;
    for (int64_t i : b.indices) ex.push_back(d.get(i));
    expect_same_batch(b, collate(ex, {}, b.indices));
    const auto out = b.tgt_out.to_vector<int64_t>();
    for (int64_t r = 0; r < b.size(); ++r)  // tgt starts with 100 + index
      EXPECT_EQ(out[static_cast<size_t>(r * b.tgt_out.size(1))], 100 + b.indices[static_cast<size_t>(r)]);
  }
}

// ---- state and resumption -------------------------------------------------

TEST(DataLoader, EpochAndPositionAdvance) {
  VectorDataset d = numbered(7);
  DataLoader loader(d, {.batch_size = 3, .seed = 0});
  EXPECT_EQ(loader.state(), (LoaderState{0, 0}));
  loader.next();
  EXPECT_EQ(loader.state(), (LoaderState{0, 1}));
  loader.next();
  loader.next();  // last (short) batch of epoch 0
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(loader.position(), 0);
  loader.next();
  EXPECT_EQ(loader.state(), (LoaderState{1, 1}));
}

TEST(DataLoader, StateRoundTripReproducesRemainingBatches) {
  VectorDataset d = numbered(23);
  for (bool drop_last : {false, true}) {
    DataLoader a(d, {.batch_size = 5, .drop_last = drop_last, .seed = 42});
    for (int k = 0; k < 7; ++k) a.next();  // into epoch 1
    const LoaderState saved = a.state();
    EXPECT_EQ(saved.epoch, 1);
    std::vector<Batch> rest;
    for (int k = 0; k < 12; ++k) rest.push_back(a.next());

    DataLoader b(d, {.batch_size = 5, .drop_last = drop_last, .seed = 42});
    b.next();  // a different place, to be overwritten
    b.set_state(saved);
    EXPECT_EQ(b.state(), saved);
    for (const Batch& want : rest) expect_same_batch(b.next(), want);
    EXPECT_EQ(b.state(), a.state());
    // batch_at is the same pure function.
    DataLoader c(d, {.batch_size = 5, .drop_last = drop_last, .seed = 42});
    expect_same_batch(c.batch_at(saved.epoch, saved.position), rest[0]);
  }
}

TEST(DataLoader, SetStateValidatesAndNormalizes) {
  VectorDataset d = numbered(10);
  DataLoader loader(d, {.batch_size = 4});
  loader.set_state({2, 3});  // position == batches_per_epoch: start of epoch 3
  EXPECT_EQ(loader.state(), (LoaderState{3, 0}));
  expect_error<ValueError>([&] { loader.set_state({0, 4}); }, {"set_state", "position 4"});
  expect_error<ValueError>([&] { loader.set_state({-1, 0}); }, {"set_state", "epoch -1"});
  expect_error<ValueError>([&] { loader.batch_at(0, 3); }, {"batch_at", "position 3"});
  EXPECT_EQ(loader.state(), (LoaderState{3, 0}));
}

TEST(DataLoader, EpochBatchesForEvaluation) {
  VectorDataset d = numbered(11);
  DataLoader eval(d, {.batch_size = 4, .shuffle = false});
  std::vector<int64_t> seen;
  int64_t count = 0;
  for (const Batch& b : eval.epoch_batches()) {
    seen.insert(seen.end(), b.indices.begin(), b.indices.end());
    ++count;
  }
  EXPECT_EQ(count, 3);
  EXPECT_EQ(eval.epoch_batches().size(), 3);
  std::vector<int64_t> all(11);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);
  EXPECT_EQ(eval.state(), (LoaderState{0, 0}));  // untouched

  // On a shuffling loader, epoch_batches(e) walks epoch e's order.
  DataLoader train(d, {.batch_size = 4, .seed = 9});
  train.next();
  seen.clear();
  for (const Batch& b : train.epoch_batches(2)) seen.insert(seen.end(), b.indices.begin(), b.indices.end());
  EXPECT_EQ(seen, train.epoch_order(2));
  EXPECT_EQ(train.state(), (LoaderState{0, 1}));
}

TEST(DataLoader, Errors) {
  VectorDataset d = numbered(5), empty;
  expect_error<ValueError>([&] { DataLoader(d, {.batch_size = 0}); }, {"DataLoader", "batch_size must be >= 1, got 0"});
  expect_error<ValueError>([&] { DataLoader(empty, {}); }, {"DataLoader", "empty"});
  expect_error<ValueError>([&] { DataLoader(d, {.batch_size = 6, .drop_last = true}); },
                           {"DataLoader", "batch_size 6", "size 5"});
  CopyTaskDataset huge({.size = std::numeric_limits<int64_t>::max()});
  expect_error<ValueError>([&] { DataLoader(huge, {.batch_size = 2}); }, {"DataLoader", "shuffle=false"});
  DataLoader stream(huge, {.batch_size = 2, .shuffle = false});
  Batch b = stream.next();
  EXPECT_EQ(b.indices, (std::vector<int64_t>{0, 1}));
  expect_error<IndexError>([&] { d.get(5); }, {"VectorDataset::get", "index 5", "size 5"});
}

// ---- token budget -------------------------------------------------------------

TEST(DataLoader, TokenBudgetBatchesStayWithinBudgetAndCoverEveryExampleOnce) {
  // Lengths vary widely: example i has src of i % 17 tokens and tgt of (7 * i) % 11 + 1.
  VectorDataset d;
  for (int64_t i = 0; i < 300; ++i) {
    Example e;
    e.src.assign(static_cast<size_t>(i % 17), 4);
    e.tgt.assign(static_cast<size_t>((7 * i) % 11 + 1), 5);
    d.add(e);
  }
  const int64_t budget = 60;
  DataLoader loader(d, {.max_tokens = budget, .seed = 3});
  std::vector<int64_t> seen;
  int64_t padded = 0, real = 0;
  for (int64_t p = 0; p < loader.batches_per_epoch(); ++p) {
    const Batch b = loader.next();
    const int64_t longest = std::max(b.src.shape()[1], b.tgt_out.shape()[1]);
    EXPECT_LE(b.size() * longest, budget) << "batch " << p;
    padded += b.size() * longest;
    for (const int64_t i : b.indices) real += static_cast<int64_t>(std::max(d.get(i).src.size(), d.get(i).tgt.size())) + 1;
    seen.insert(seen.end(), b.indices.begin(), b.indices.end());
  }
  EXPECT_EQ(loader.epoch(), 1);
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(300);
  std::iota(all.begin(), all.end(), int64_t{0});
  EXPECT_EQ(seen, all);
  // Length-sorted batches pad little: padding is under 10% of the budget used
  // (batches of 60 random rows would pad about half).
  EXPECT_LT(static_cast<double>(padded - real), 0.1 * static_cast<double>(padded));
  // A greedy cut: no two neighbouring batches could have been one.
  EXPECT_LT(loader.batches_per_epoch(), 2 * real / budget + 2);
}

TEST(DataLoader, TokenBudgetOrderIsSeededAndResumable) {
  VectorDataset d = numbered(80);
  DataLoader a(d, {.max_tokens = 12, .seed = 1}), b(d, {.max_tokens = 12, .seed = 1}), c(d, {.max_tokens = 12, .seed = 2});
  const std::vector<int64_t> a0 = epoch_indices(a), b0 = epoch_indices(b), c0 = epoch_indices(c);
  EXPECT_EQ(a0, b0);
  EXPECT_NE(a0, c0);  // another seed visits the batches in another order
  EXPECT_EQ(a.epoch_order(0), a0);
  EXPECT_NE(a.epoch_order(1), a0);  // and each epoch in its own
  // Resume mid-epoch: the remaining batches are the same.
  for (int k = 0; k < 5; ++k) a.next();
  DataLoader r(d, {.max_tokens = 12, .seed = 1});
  r.set_state(a.state());
  for (int k = 0; k < 8; ++k) EXPECT_EQ(a.next().indices, r.next().indices) << k;
}

TEST(DataLoader, TokenBudgetSmallerThanAnExampleNamesIt) {
  VectorDataset d = numbered(10);  // example 2 is the first with 3 tokens on a side: 4 with <eos>
  expect_error<ValueError>([&] { DataLoader(d, {.max_tokens = 3}); },
                           {"DataLoader", "example 2 has 4 tokens", "max_tokens 3", "raise max_tokens"});
  expect_error<ValueError>([&] { DataLoader(d, {.max_tokens = -1}); }, {"max_tokens must be >= 0"});
}
