// index_select, embedding and gather.
#include <gtest/gtest.h>

#include <attograd/autograd/autograd.h>
#include <attograd/autograd/ops/indexing.h>
#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

}  // namespace

// ---- index_select -------------------------------------------------------------------

TEST(IndexSelect, Values) {
  const Tensor x = iota({3, 4});  // [[0 1 2 3] [4 5 6 7] [8 9 10 11]]
  const Tensor rows = index_select(x, 0, ids({2, 0, 2}, {3}));
  EXPECT_EQ(rows.shape(), (Shape{3, 4}));
  EXPECT_EQ(rows.to_vector<double>(), (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}));
  const Tensor cols = index_select(x, -1, ids({3, 1}, {2}));
  EXPECT_EQ(cols.shape(), (Shape{3, 2}));
  EXPECT_EQ(cols.to_vector<double>(), (std::vector<double>{3, 1, 7, 5, 11, 9}));
  const Tensor one = index_select(x, 0, Tensor::from_vector(std::vector<int64_t>{1}, {}));  // 0-d index
  EXPECT_EQ(one.shape(), (Shape{1, 4}));
  EXPECT_EQ(index_select(x, 1, ids({}, {0})).shape(), (Shape{3, 0}));
  const Tensor ints = index_select(ids({5, 6, 7}, {3}), 0, ids({2, 2}, {2}));  // any dtype
  EXPECT_EQ(ints.to_vector<int64_t>(), (std::vector<int64_t>{7, 7}));
}

TEST(IndexSelect, NonContiguousInput) {
  const Tensor x = iota({3, 4}).transpose(0, 1);  // [4, 3]: x[i][j] = 4 j + i
  const Tensor out = index_select(x, 1, ids({2, 0}, {2}));
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{8, 0, 9, 1, 10, 2, 11, 3}));
}

// An index used k times sends back k gradients, summed.
TEST(IndexSelect, RepeatedIndicesAccumulate) {
  const Tensor x = iota({4, 2}).requires_grad_();
  const Tensor out = index_select(x, 0, ids({1, 3, 1, 1}, {4}));
  out.backward(Tensor::from_list({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, DType::f64));
  // row 1 gets grad rows 0, 2, 3; row 3 gets grad row 1; rows 0 and 2 nothing.
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 1 + 5 + 7, 2 + 6 + 8, 0, 0, 3, 4}));
}

TEST(IndexSelect, Gradcheck) {
  Generator gen(1);
  const Tensor x = Tensor::randn({3, 4, 2}, gen, DType::f64).requires_grad_();
  const Tensor idx = ids({3, 0, 3, 1, 3}, {5});
  for (int64_t dim : {0, 1, 2}) {
    const Tensor index = dim == 1 ? idx : ids({1, 0, 1}, {3});
    const auto r = gradcheck([&](const std::vector<Tensor>& in) { return index_select(in[0], dim, index); }, {x});
    EXPECT_TRUE(r.ok) << "dim " << dim << "\n" << r.summary();
  }
  const Tensor xt = Tensor::randn({4, 3}, gen, DType::f64).transpose(0, 1).detach().requires_grad_();
  const auto r = gradcheck([&](const std::vector<Tensor>& in) { return index_select(in[0], 1, idx); }, {xt});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(IndexSelect, Errors) {
  const Tensor x = Tensor::zeros({5, 3});
  expect_error<IndexError>([&] { index_select(x, 0, ids({0, 5}, {2})); }, {"index_select", "index 5", "[0, 5)"});
  expect_error<IndexError>([&] { index_select(x, 0, ids({-1}, {1})); }, {"index_select", "index -1", "[0, 5)"});
  expect_error<IndexError>([&] { index_select(x, 2, ids({0}, {1})); }, {"index_select", "dim 2"});
  expect_error<DTypeError>([&] { index_select(x, 0, Tensor::zeros({2})); }, {"index_select", "i64", "f32"});
  expect_error<ShapeError>([&] { index_select(x, 0, ids({0, 1}, {1, 2})); }, {"index_select", "1-d", "[1, 2]"});
}

// ---- embedding ------------------------------------------------------------------------

TEST(Embedding, Values) {
  const Tensor w = iota({5, 2});  // row v = [2v, 2v + 1]
  const Tensor out = embedding(w, ids({4, 0, 4, 2}, {2, 2}));
  EXPECT_EQ(out.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{8, 9, 0, 1, 8, 9, 4, 5}));
  EXPECT_EQ(embedding(w, Tensor::from_vector(std::vector<int64_t>{3}, {})).to_vector<double>(),
            (std::vector<double>{6, 7}));  // 0-d ids -> [E]
  const Tensor wt = iota({2, 5}).transpose(0, 1);  // [5, 2] view: row v = [v, v + 5]
  EXPECT_EQ(embedding(wt, ids({1, 3}, {2})).to_vector<double>(), (std::vector<double>{1, 6, 3, 8}));
}

TEST(Embedding, RepeatedIdsAccumulate) {
  const Tensor w = Tensor::zeros({4, 3}, DType::f64).requires_grad_();
  const Tensor out = embedding(w, ids({2, 2, 0, 2}, {2, 2}));
  out.backward(Tensor::ones({2, 2, 3}, DType::f64));
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{1, 1, 1, 0, 0, 0, 3, 3, 3, 0, 0, 0}));
}

// PyTorch: the padding_idx row receives no gradient; its forward value is the row's.
TEST(Embedding, PaddingIdxGetsNoGradient) {
  for (int64_t pad : {1, -3}) {  // -3 is row 1 of 4
    const Tensor w = iota({4, 2}).requires_grad_();
    const Tensor out = embedding(w, ids({1, 3, 1, 0}, {4}), pad);
    EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{2, 3, 6, 7, 2, 3, 0, 1}));
    out.backward(Tensor::from_list({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, DType::f64));
    EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{7, 8, 0, 0, 0, 0, 3, 4})) << "pad " << pad;
  }
}

TEST(Embedding, Gradcheck) {
  Generator gen(2);
  Tensor w = Tensor::randn({5, 3}, gen, DType::f64).requires_grad_();
  const Tensor i = ids({4, 1, 4, 0, 2, 4}, {2, 3});
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], i); }, {w});
  EXPECT_TRUE(r.ok) << r.summary();
  // With padding_idx the analytic gradient is the true one with the padding row zeroed.
  const Tensor g = Tensor::randn({2, 3, 3}, gen, DType::f64);
  embedding(w, i).backward(g);
  std::vector<double> want = w.grad().to_vector<double>();
  std::fill(want.begin() + 4 * 3, want.end(), 0.0);
  w.zero_grad();
  embedding(w, i, 4).backward(g);
  EXPECT_EQ(w.grad().to_vector<double>(), want);
  const Tensor wt = Tensor::randn({3, 5}, gen, DType::f64).transpose(0, 1).detach().requires_grad_();  // tied layout
  r = gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], i.transpose(0, 1)); }, {wt});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(Embedding, Errors) {
  const Tensor w = Tensor::zeros({10, 4});
  expect_error<IndexError>([&] { embedding(w, ids({3, 12}, {2})); }, {"embedding", "id 12", "[0, 10)", "[10, 4]"});
  expect_error<IndexError>([&] { embedding(w, ids({-1}, {1})); }, {"embedding", "id -1", "[0, 10)"});
  expect_error<ValueError>([&] { embedding(w, ids({0}, {1}), 10); }, {"embedding", "padding_idx 10"});
  expect_error<DTypeError>([&] { embedding(w, Tensor::zeros({2})); }, {"embedding", "i64"});
  expect_error<ShapeError>([&] { embedding(Tensor::zeros({10}), ids({0}, {1})); }, {"embedding", "[V, E]", "[10]"});
}

// ---- gather ------------------------------------------------------------------------------

TEST(Gather, Values) {
  const Tensor x = iota({2, 3});  // [[0 1 2] [3 4 5]]
  // dim 1: out[i][j] = x[i][index[i][j]]
  const Tensor a = gather(x, 1, ids({2, 0, 1, 1}, {2, 2}));
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{2, 0, 4, 4}));
  // dim 0: out[i][j] = x[index[i][j]][j]
  const Tensor b = gather(x, 0, ids({1, 0, 1}, {1, 3}));
  EXPECT_EQ(b.shape(), (Shape{1, 3}));
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{3, 1, 5}));
  // the loss use: each row's target score
  const Tensor t = gather(x, 1, ids({1, 2}, {2}).unsqueeze(1));
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{1, 5}));
}

TEST(Gather, NonContiguousInputAndIndex) {
  const Tensor x = iota({3, 2}).transpose(0, 1);                  // [2, 3]: [[0 2 4] [1 3 5]]
  const Tensor index = ids({0, 2, 1, 1}, {2, 2}).transpose(0, 1);  // [[0 1] [2 1]]
  EXPECT_EQ(gather(x, 1, index).to_vector<double>(), (std::vector<double>{0, 2, 5, 3}));
}

TEST(Gather, RepeatedIndicesAccumulate) {
  const Tensor x = Tensor::zeros({2, 3}, DType::f64).requires_grad_();
  const Tensor out = gather(x, 1, ids({0, 0, 0, 2, 1, 2}, {2, 3}));
  out.backward(Tensor::from_list({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{6, 0, 0, 0, 5, 10}));
}

TEST(Gather, Gradcheck) {
  Generator gen(3);
  const Tensor x = Tensor::randn({3, 4, 2}, gen, DType::f64).requires_grad_();
  const Tensor i0 = ids({2, 0, 1, 1, 0, 0, 2, 2}, {2, 2, 2});  // dim 0, smaller than x elsewhere
  const Tensor i1 = ids({3, 3, 0, 1, 2, 0, 1, 1, 3, 3, 3, 0}, {3, 2, 2});
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return gather(in[0], 0, i0); }, {x});
  EXPECT_TRUE(r.ok) << r.summary();
  r = gradcheck([&](const std::vector<Tensor>& in) { return gather(in[0], 1, i1); }, {x});
  EXPECT_TRUE(r.ok) << r.summary();
  const Tensor xt = Tensor::randn({4, 3}, gen, DType::f64).transpose(0, 1).detach().requires_grad_();
  r = gradcheck([&](const std::vector<Tensor>& in) { return gather(in[0], -1, ids({3, 3, 1, 0, 2, 2}, {3, 2})); }, {xt});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(Gather, Errors) {
  const Tensor x = Tensor::zeros({2, 3});
  expect_error<IndexError>([&] { gather(x, 1, ids({0, 3}, {2, 1})); }, {"gather", "index 3", "[0, 3)", "[2, 3]"});
  expect_error<IndexError>([&] { gather(x, 0, ids({-1}, {1, 1})); }, {"gather", "index -1", "[0, 2)"});
  expect_error<ShapeError>([&] { gather(x, 1, ids({0, 1}, {2})); }, {"gather", "[2]", "[2, 3]"});
  expect_error<ShapeError>([&] { gather(x, 1, ids({0, 0, 0}, {3, 1})); }, {"gather", "[3, 1]", "[2, 3]"});
  expect_error<DTypeError>([&] { gather(x, 1, Tensor::zeros({2, 1})); }, {"gather", "i64"});
}
