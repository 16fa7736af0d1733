// The copy-task generator: determinism, ranges, reverse variant, vocab,
// held-out disjointness.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <set>

#include <attograd/data/copy_task.h>
#include <attograd/data/loader.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_error;

TEST(CopyTask, DeterministicBySeed) {
  CopyTaskOptions o{.num_symbols = 8, .min_len = 2, .max_len = 9, .seed = 11, .size = 200};
  CopyTaskDataset a(o), b(o);
  o.seed = 12;
  CopyTaskDataset c(o);
  int differ = 0;
  for (int64_t i = 0; i < 200; ++i) {
    EXPECT_EQ(a.get(i), b.get(i));
    differ += a.get(i) != c.get(i);
  }
  EXPECT_GT(differ, 150);
  // get(i) is a pure function of i: order of calls does not matter.
  Example late = a.get(150);
  for (int64_t i = 199; i >= 0; --i) a.get(i);
  EXPECT_EQ(a.get(150), late);
  // Consecutive examples are not all alike.
  std::set<std::vector<int64_t>> distinct;
  for (int64_t i = 0; i < 200; ++i) distinct.insert(a.get(i).src);
  EXPECT_GT(distinct.size(), 190u);
}

TEST(CopyTask, LengthsAndSymbolsInRange) {
  CopyTaskDataset d({.num_symbols = 5, .min_len = 3, .max_len = 6, .seed = 1, .size = 2000});
  std::set<size_t> lengths;
  std::set<int64_t> symbols;
  for (int64_t i = 0; i < d.size(); ++i) {
    Example e = d.get(i);
    EXPECT_GE(e.src.size(), 3u);
    EXPECT_LE(e.src.size(), 6u);
    lengths.insert(e.src.size());
    for (int64_t s : e.src) {
      EXPECT_GE(s, 4);
      EXPECT_LT(s, 9);
      symbols.insert(s);
    }
    EXPECT_EQ(e.tgt, e.src);
  }
  EXPECT_EQ(lengths, (std::set<size_t>{3, 4, 5, 6}));
  EXPECT_EQ(symbols, (std::set<int64_t>{4, 5, 6, 7, 8}));
  // A fixed length and a single symbol.
  CopyTaskDataset one({.num_symbols = 1, .min_len = 4, .max_len = 4, .size = 3});
  EXPECT_EQ(one.get(2).src, (std::vector<int64_t>{4, 4, 4, 4}));
}

TEST(CopyTask, ReverseVariant) {
  CopyTaskOptions o{.num_symbols = 20, .min_len = 1, .max_len = 12, .seed = 3, .size = 100};
  CopyTaskDataset copy(o);
  o.reverse = true;
  CopyTaskDataset rev(o);
  int asymmetric = 0;
  for (int64_t i = 0; i < 100; ++i) {
    Example c = copy.get(i), r = rev.get(i);
    EXPECT_EQ(r.src, c.src);  // same sources for the same seed
    std::vector<int64_t> reversed(r.src.rbegin(), r.src.rend());
    EXPECT_EQ(r.tgt, reversed);
    asymmetric += r.tgt != r.src;
  }
  EXPECT_GT(asymmetric, 50);
}

TEST(CopyTask, VocabNames) {
  EXPECT_EQ(copy_symbol_name(0), "a");
  EXPECT_EQ(copy_symbol_name(25), "z");
  EXPECT_EQ(copy_symbol_name(26), "A");
  EXPECT_EQ(copy_symbol_name(51), "Z");
  EXPECT_EQ(copy_symbol_name(52), "0");
  EXPECT_EQ(copy_symbol_name(61), "9");
  EXPECT_EQ(copy_symbol_name(62), "s62");
  Vocab v = copy_task_vocab(70);
  EXPECT_EQ(v.size(), 74);
  EXPECT_EQ(v.id("a"), 4);
  EXPECT_EQ(v.id("A"), 30);
  EXPECT_EQ(v.id("0"), 56);
  EXPECT_EQ(v.id("s69"), 73);
  CopyTaskDataset d({.num_symbols = 3, .min_len = 5, .max_len = 5, .seed = 2, .size = 1});
  Vocab small = copy_task_vocab(3);
  EXPECT_EQ(small.tokens().back(), "c");
  for (const auto& tok : small.decode(d.get(0).src)) EXPECT_TRUE(tok == "a" || tok == "b" || tok == "c") << tok;
  EXPECT_EQ(small.encode(small.decode(d.get(0).src), OnUnknown::error), d.get(0).src);
  expect_error<ValueError>([] { copy_task_vocab(0); }, {"copy_task_vocab", "num_symbols"});
  expect_error<ValueError>([] { copy_symbol_name(-1); }, {"copy_symbol_name"});
}

TEST(CopyTask, HeldOutDisjointness) {
  // A small space (2 + 4 + 8 sequences of length 1..3): heavy overlap by chance.
  CopyTaskOptions train_o{.num_symbols = 2, .min_len = 1, .max_len = 3, .seed = 1, .size = 30};
  CopyTaskDataset train(train_o);
  CopyTaskOptions held_o = train_o;
  held_o.seed = 2;
  held_o.size = 20;
  CopyTaskDataset naive(held_o);
  std::vector<int64_t> shared = find_overlap(train, naive);
  EXPECT_FALSE(shared.empty());
  for (int64_t i : shared) {
    bool found = false;
    for (int64_t j = 0; j < train.size() && !found; ++j) found = train.get(j) == naive.get(i);
    EXPECT_TRUE(found) << "held-out " << i << " reported but not in train";
  }

  // A larger space: the disjoint held-out set avoids train and repeats nothing.
  train_o = {.num_symbols = 3, .min_len = 1, .max_len = 6, .seed = 1, .size = 300};
  CopyTaskDataset train2(train_o);
  held_o = train_o;
  held_o.seed = 99;
  held_o.size = 100;
  VectorDataset held = make_disjoint_heldout(train2, held_o);
  EXPECT_EQ(held.size(), 100);
  EXPECT_TRUE(find_overlap(train2, held).empty());
  std::set<std::vector<int64_t>> distinct;
  for (const Example& e : held.examples()) {
    distinct.insert(e.src);
    EXPECT_EQ(e.tgt, e.src);
    EXPECT_GE(e.src.size(), 1u);
    EXPECT_LE(e.src.size(), 6u);
  }
  EXPECT_EQ(distinct.size(), 100u);

  // Exhausted space: 2 + 4 sequences, all of them in train.
  CopyTaskOptions tiny{.num_symbols = 2, .min_len = 1, .max_len = 2, .seed = 1, .size = 200};
  CopyTaskDataset tiny_train(tiny);
  tiny.seed = 5;
  tiny.size = 3;
  expect_error<ValueError>([&] { make_disjoint_heldout(tiny_train, tiny); },
                           {"make_disjoint_heldout", "found only 0 of 3", "max_len"});
}

TEST(CopyTask, FeedsTheLoader) {
  CopyTaskDataset d({.num_symbols = 6, .min_len = 2, .max_len = 7, .seed = 4, .size = 50});
  DataLoader loader(d, {.batch_size = 8, .seed = 1});
  Batch b = loader.next();
  // For the copy task the decoder must predict exactly the encoder input.
  EXPECT_EQ(b.src.to_vector<int64_t>(), b.tgt_out.to_vector<int64_t>());
  EXPECT_EQ(b.src_key_padding_mask.to_vector<bool>(), b.tgt_key_padding_mask.to_vector<bool>());

  // An "infinite" stream needs no storage; far indices work.
  CopyTaskDataset stream({.num_symbols = 6, .size = std::numeric_limits<int64_t>::max()});
  Example far = stream.get(std::numeric_limits<int64_t>::max() - 1);
  EXPECT_GE(far.src.size(), 1u);
  DataLoader sl(stream, {.batch_size = 4, .shuffle = false});
  EXPECT_EQ(sl.next().indices, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(CopyTask, Errors) {
  expect_error<ValueError>([] { CopyTaskDataset({.num_symbols = 0}); }, {"CopyTaskDataset", "num_symbols must be >= 1, got 0"});
  expect_error<ValueError>([] { CopyTaskDataset({.min_len = 5, .max_len = 4}); }, {"CopyTaskDataset", "min_len 5 > max_len 4"});
  expect_error<ValueError>([] { CopyTaskDataset({.min_len = 0}); }, {"CopyTaskDataset", "min_len must be >= 1"});
  expect_error<ValueError>([] { CopyTaskDataset({.size = -1}); }, {"CopyTaskDataset", "size"});
  CopyTaskDataset d({.size = 3});
  expect_error<IndexError>([&] { d.get(3); }, {"CopyTaskDataset::get", "index 3", "size 3"});
  expect_error<IndexError>([&] { d.get(-1); }, {"CopyTaskDataset::get", "index -1"});
}
