// Random-graph gradchecks: a property test of the op library as a whole. From
// a seed, a builder composes random ops (elementwise with broadcasting,
// reductions over dims, views, transposes, slices, cat/stack, matmul/linear,
// softmax, layer_norm, indexing, attention, losses) on random float64 leaves
// of random shapes, then gradchecks the whole graph (attograd/autograd/gradcheck.h).
// A failure prints the seed and the graph; rerun one graph with
//   ATTOGRAD_GRAPH_SEED=<seed> build/bin/test_random_graphs
//
// Keeping finite differences meaningful: ops with kinks (relu, abs, clamp,
// max) only take leaves, whose random values sit far from any kink or tie;
// log/sqrt/div/pow take inputs made positive by smooth ops; and a step whose
// value leaves [-1e3, 1e3] is dropped, so rounding stays below the tolerance.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <attograd/autograd/autograd.h>

namespace attograd {
namespace {

using Values = std::vector<Tensor>;
using OpFn = std::function<Tensor(const Values&)>;

class Choices {
 public:
  explicit Choices(uint64_t seed) : engine_(seed) {}
  int64_t below(int64_t n) { return static_cast<int64_t>(engine_() % static_cast<uint64_t>(n)); }
  bool coin(double p = 0.5) { return static_cast<double>(engine_() >> 11) * 0x1.0p-53 < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[static_cast<size_t>(below(static_cast<int64_t>(v.size())))]; }

 private:
  std::mt19937_64 engine_;
};

int64_t numel_of(const Shape& s) { return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>()); }

// A graph: entries in order, each a leaf (an input of gradcheck) or an op over
// earlier entries. evaluate() replays it on gradcheck's inputs.
struct Graph {
  struct Entry {
    int input = -1;  // >= 0: the leaf inputs[input]
    OpFn op;
    std::vector<int> uses;
    std::string text;
  };
  std::vector<Entry> entries;
  std::vector<Tensor> inputs;
  OpFn output;  // over all entry values

  Tensor evaluate(const Values& in) const {
    Values v;
    v.reserve(entries.size());
    for (const Entry& e : entries) v.push_back(e.input >= 0 ? in[static_cast<size_t>(e.input)] : e.op(v));
    return output(v);
  }
  std::string describe() const {
    std::string s;
    for (size_t i = 0; i < entries.size(); ++i) s += fmt::format("  t{} = {}\n", i, entries[i].text);
    return s;
  }
};

class Builder {
 public:
  explicit Builder(uint64_t seed) : ch_(seed), gen_(seed ^ 0x9e3779b97f4a7c15ull) {}

  Graph build() {
    const int64_t leaves = 1 + ch_.below(2);
    for (int64_t i = 0; i < leaves; ++i) leaf(random_shape());
    const int64_t steps = 2 + ch_.below(5);
    for (int64_t done = 0, tries = 0; done < steps && tries < 200; ++tries) done += step() ? 1 : 0;
    finish();
    return std::move(g_);
  }

 private:
  // ---- bookkeeping ----------------------------------------------------------------------
  const Tensor& value(int i) const { return values_[static_cast<size_t>(i)]; }
  const Shape& shape(int i) const { return value(i).shape(); }
  bool is_leaf(int i) const { return g_.entries[static_cast<size_t>(i)].input >= 0; }

  int leaf(const Shape& s) {
    Tensor t = Tensor::randn(s, gen_, DType::f64).requires_grad_();
    g_.entries.push_back({static_cast<int>(g_.inputs.size()), nullptr, {}, fmt::format("leaf {}", s)});
    g_.inputs.push_back(t);
    values_.push_back(t);
    return static_cast<int>(values_.size()) - 1;
  }

  // Records an op if its value is finite and within [-1e3, 1e3]; false otherwise.
  bool add(std::string text, std::vector<int> uses, OpFn op) {
    Tensor v = op(values_);
    for (double x : v.to_vector<double>())
      if (!(std::abs(x) <= 1e3)) return false;
    g_.entries.push_back({-1, std::move(op), std::move(uses), fmt::format("{} -> {}", text, v.shape())});
    values_.push_back(v);
    return true;
  }

  Shape random_shape(int64_t max_rank = 3) {
    Shape s;
    const int64_t rank = ch_.below(max_rank + 1);
    for (int64_t d = 0; d < rank; ++d) s.push_back(1 + ch_.below(4));
    while (numel_of(s) > 24) s.back() = 1;
    return s;
  }

  // An entry, recent ones more likely; `want` filters.
  int pick(const std::function<bool(int)>& want = nullptr) {
    std::vector<int> ok;
    for (int i = 0; i < static_cast<int>(values_.size()); ++i)
      if (!want || want(i)) ok.push_back(i);
    if (ok.empty()) return -1;
    return ch_.coin(0.5) ? ok.back() : ch_.pick(ok);
  }
  int pick_rank(int64_t lo) { return pick([&](int i) { return value(i).dim() >= lo; }); }

  int64_t dim_of(int i) { return ch_.below(value(i).dim()); }

  // A shape that broadcasts against s: some leading dims dropped, some set to 1.
  Shape broadcastable(const Shape& s) {
    Shape b(s.begin() + ch_.below(static_cast<int64_t>(s.size()) + 1), s.end());
    for (auto& d : b)
      if (ch_.coin(0.3)) d = 1;
    return b;
  }

  // A second operand for a binary op with a: an existing entry that
  // broadcasts with it, or a new leaf.
  int partner(int a) {
    if (ch_.coin(0.5)) {
      const int b = pick([&](int i) { return i != a && broadcasts(shape(a), shape(i)); });
      if (b >= 0) return b;
    }
    return leaf(broadcastable(shape(a)));
  }
  static bool broadcasts(const Shape& a, const Shape& b) {
    for (size_t k = 1; k <= std::min(a.size(), b.size()); ++k) {
      const int64_t x = a[a.size() - k], y = b[b.size() - k];
      if (x != y && x != 1 && y != 1) return false;
    }
    return numel_of(a) * numel_of(b) <= 24 * 24;
  }

  std::vector<int64_t> random_dims(int64_t rank) {
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < rank; ++d)
      if (ch_.coin(0.5)) dims.push_back(ch_.coin(0.5) ? d : d - rank);  // negative dims too
    if (dims.empty() && rank > 0) dims.push_back(ch_.below(rank));
    return dims;
  }

  Tensor random_index(int64_t n, const Shape& shape) {
    std::vector<int64_t> ids(static_cast<size_t>(numel_of(shape)));
    for (auto& id : ids) id = ch_.below(n);
    return Tensor::from_vector(ids, shape);
  }

  Tensor random_mask(const Shape& shape) {
    std::vector<bool> m(static_cast<size_t>(numel_of(shape)));
    for (size_t i = 0; i < m.size(); ++i) m[i] = ch_.coin(0.4);
    return Tensor::from_vector(m, shape);
  }

  // ---- ops --------------------------------------------------------------------------------
  bool step() {
    switch (ch_.below(12)) {
      case 0: return smooth_unary();
      case 1: return kinked_unary();
      case 2: case 3: return binary();
      case 4: return reduction();
      case 5: case 6: return shape_op();
      case 7: return matmul_op();
      case 8: return normalize();
      case 9: return indexing();
      case 10: return loss();
      default: return attention();
    }
  }

  bool smooth_unary() {
    const int a = pick();
    const std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>> ops = {
        {"exp", [](const Tensor& x) { return exp(x); }},
        {"tanh", [](const Tensor& x) { return tanh(x); }},
        {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
        {"gelu", [](const Tensor& x) { return gelu(x); }},
        {"gelu(tanh)", [](const Tensor& x) { return gelu(x, GeluApprox::tanh); }},
        {"neg", [](const Tensor& x) { return -x; }},
        {"log(1 + x²)", [](const Tensor& x) { return log(x * x + 1.0); }},
        {"sqrt(x² + 0.5)", [](const Tensor& x) { return sqrt(x * x + 0.5); }},
        {"pow(x, 3)", [](const Tensor& x) { return pow(x, 3.0); }},
        {"pow(sigmoid(x) + 0.5, -1.5)", [](const Tensor& x) { return pow(sigmoid(x) + 0.5, -1.5); }},
        {"2 / (1 + x²)", [](const Tensor& x) { return 2.0 / (1.0 + x * x); }},
        {"3 - x * 0.5", [](const Tensor& x) { return 3.0 - x * 0.5; }},
    };
    const auto& [name, f] = ch_.pick(ops);
    return add(fmt::format("{}(t{})", name, a), {a}, [a, f = f](const Values& v) { return f(v[static_cast<size_t>(a)]); });
  }

  bool kinked_unary() {
    const int a = pick([&](int i) { return is_leaf(i); });
    switch (ch_.below(5)) {
      case 0: return add(fmt::format("relu(t{})", a), {a}, [a](const Values& v) { return relu(v[a]); });
      case 1: return add(fmt::format("abs(t{})", a), {a}, [a](const Values& v) { return abs(v[a]); });
      case 2: return add(fmt::format("clamp(t{}, -0.5, 0.5)", a), {a},
                         [a](const Values& v) { return clamp(v[a], -0.5, 0.5); });
      case 3: return add(fmt::format("max(t{})", a), {a}, [a](const Values& v) { return max(v[a]); });
      default: {
        if (value(a).dim() == 0) return false;
        const int64_t d = dim_of(a);
        const bool keep = ch_.coin(0.5);
        return add(fmt::format("max(t{}, dim {}, keepdim {}).values", a, d, keep), {a},
                   [=](const Values& v) { return max(v[a], d, keep).values; });
      }
    }
  }

  bool binary() {
    const int a = pick();
    const int b = partner(a);
    const bool swap = ch_.coin(0.5);
    const int x = swap ? b : a, y = swap ? a : b;
    switch (ch_.below(7)) {
      case 0: return add(fmt::format("t{} + t{}", x, y), {x, y}, [=](const Values& v) { return v[x] + v[y]; });
      case 1: return add(fmt::format("t{} - t{}", x, y), {x, y}, [=](const Values& v) { return v[x] - v[y]; });
      case 2: return add(fmt::format("t{} * t{}", x, y), {x, y}, [=](const Values& v) { return v[x] * v[y]; });
      case 3: return add(fmt::format("t{} / (1 + t{}²)", x, y), {x, y},
                         [=](const Values& v) { return v[x] / (v[y] * v[y] + 1.0); });
      case 4: return add(fmt::format("pow(sigmoid(t{}) + 0.5, t{})", x, y), {x, y},
                         [=](const Values& v) { return pow(sigmoid(v[x]) + 0.5, v[y]); });
      case 5: {
        const Tensor cond = random_mask(broadcastable(broadcast_shape(x, y)));
        return add(fmt::format("where(mask {}, t{}, t{})", cond.shape(), x, y), {x, y},
                   [=](const Values& v) { return where(cond, v[x], v[y]); });
      }
      default: {
        const Tensor mask = random_mask(broadcastable(shape(a)));
        return add(fmt::format("masked_fill(t{}, mask {}, 0.7)", a, mask.shape()), {a},
                   [=](const Values& v) { return masked_fill(v[a], mask, 0.7); });
      }
    }
  }
  Shape broadcast_shape(int x, int y) const { return (value(x) + value(y)).shape(); }

  bool reduction() {
    const int a = pick();
    const int64_t rank = value(a).dim();
    const std::vector<int64_t> dims = random_dims(rank);
    const bool keep = ch_.coin(0.5);
    int64_t count = 1;
    for (int64_t d : dims) count *= shape(a)[static_cast<size_t>(d < 0 ? d + rank : d)];
    switch (ch_.below(4)) {
      case 0: return add(fmt::format("sum(t{}, {}, keepdim {})", a, dims, keep), {a},
                         [=](const Values& v) { return sum(v[a], dims, keep); });
      case 1: return add(fmt::format("mean(t{}, {}, keepdim {})", a, dims, keep), {a},
                         [=](const Values& v) { return mean(v[a], dims, keep); });
      case 2: {
        const int64_t correction = count > 1 ? ch_.below(2) : 0;
        return add(fmt::format("var(t{}, {}, correction {}, keepdim {})", a, dims, correction, keep), {a},
                   [=](const Values& v) { return var(v[a], dims, correction, keep); });
      }
      default: return add(fmt::format("mean(t{})", a), {a}, [=](const Values& v) { return mean(v[a]); });
    }
  }

  bool shape_op() {
    const int a = pick();
    const Shape s = shape(a);
    const int64_t rank = static_cast<int64_t>(s.size());
    switch (ch_.below(12)) {
      case 0: {  // reshape to another factorization (one -1)
        Shape to;
        int64_t rest = numel_of(s);
        while (rest > 1 && to.size() < 3) {
          std::vector<int64_t> divisors;
          for (int64_t k = 1; k <= rest; ++k)
            if (rest % k == 0) divisors.push_back(k);
          to.push_back(ch_.pick(divisors));
          rest /= to.back();
        }
        if (rest > 1) to.push_back(rest);
        if (!to.empty() && ch_.coin(0.5)) to[static_cast<size_t>(ch_.below(static_cast<int64_t>(to.size())))] = -1;
        return add(fmt::format("reshape(t{}, {})", a, to), {a}, [=](const Values& v) { return v[a].reshape(to); });
      }
      case 1:
        if (!value(a).is_contiguous()) return false;
        return add(fmt::format("view(t{}, [{}])", a, numel_of(s)), {a},
                   [=](const Values& v) { return v[a].view({numel_of(s)}); });
      case 2: {
        if (rank < 2) return false;
        const int64_t d0 = ch_.below(rank), d1 = ch_.below(rank);
        return add(fmt::format("transpose(t{}, {}, {})", a, d0, d1), {a},
                   [=](const Values& v) { return v[a].transpose(d0, d1); });
      }
      case 3: {
        std::vector<int64_t> perm(static_cast<size_t>(rank));
        std::iota(perm.begin(), perm.end(), int64_t{0});
        for (int64_t i = rank - 1; i > 0; --i) std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(ch_.below(i + 1))]);
        return add(fmt::format("permute(t{}, {})", a, perm), {a}, [=](const Values& v) { return v[a].permute(perm); });
      }
      case 4: {
        const int64_t d = ch_.below(rank + 1);
        return add(fmt::format("unsqueeze(t{}, {})", a, d), {a}, [=](const Values& v) { return v[a].unsqueeze(d); });
      }
      case 5: return add(fmt::format("squeeze(t{})", a), {a}, [=](const Values& v) { return v[a].squeeze(); });
      case 6: {  // expand a size-1 dim (or a new leading one) to 3
        Shape to = s;
        std::vector<size_t> ones;
        for (size_t d = 0; d < to.size(); ++d)
          if (to[d] == 1) ones.push_back(d);
        if (ones.empty() || ch_.coin(0.3)) to.insert(to.begin(), 2);
        else to[ch_.pick(ones)] = 3;
        if (numel_of(to) > 48) return false;
        return add(fmt::format("expand(t{}, {})", a, to), {a}, [=](const Values& v) { return v[a].expand(to); });
      }
      case 7: {
        if (rank == 0) return false;
        const int64_t d = dim_of(a), n = s[static_cast<size_t>(d)];
        const int64_t start = ch_.below(n) - (ch_.coin(0.3) ? n : 0);  // negative starts wrap
        const int64_t end = n - ch_.below(n - (start < 0 ? start + n : start)) + (ch_.coin(0.2) ? 5 : 0);
        const int64_t by = 1 + ch_.below(2);
        return add(fmt::format("slice(t{}, {}, {}, {}, {})", a, d, start, end, by), {a},
                   [=](const Values& v) { return v[a].slice(d, start, end, by); });
      }
      case 8: {
        if (rank == 0) return false;
        const int64_t d = dim_of(a), n = s[static_cast<size_t>(d)];
        const int64_t start = ch_.below(n), len = 1 + ch_.below(n - start);
        return add(fmt::format("narrow(t{}, {}, {}, {})", a, d, start, len), {a},
                   [=](const Values& v) { return v[a].narrow(d, start, len); });
      }
      case 9: {  // cat with itself or a leaf that differs along dim
        if (rank == 0) return false;
        const int64_t d = dim_of(a);
        Shape other = s;
        other[static_cast<size_t>(d)] = 1 + ch_.below(3);
        const int b = ch_.coin(0.3) ? a : leaf(other);
        return add(fmt::format("cat([t{}, t{}], {})", a, b, d), {a, b},
                   [=](const Values& v) { return cat({v[a], v[b]}, d); });
      }
      case 10: {
        const int b = leaf(s);
        const int64_t d = ch_.below(rank + 1);
        return add(fmt::format("stack([t{}, t{}], {})", b, a, d), {a, b},
                   [=](const Values& v) { return stack({v[b], v[a]}, d); });
      }
      default: {
        if (rank == 0) return false;
        const int64_t d = dim_of(a), n = s[static_cast<size_t>(d)];
        const int64_t pieces = 1 + ch_.below(n), which = ch_.below(pieces);
        if (ch_.coin(0.5))
          return add(fmt::format("chunk(t{}, {}, {})[{}]", a, pieces, d, which), {a}, [=](const Values& v) {
            auto c = chunk(v[a], pieces, d);
            return c[static_cast<size_t>(std::min<int64_t>(which, static_cast<int64_t>(c.size()) - 1))];
          });
        return add(fmt::format("split(t{}, 1, {})[{}].contiguous()", a, d, which % n), {a},
                   [=](const Values& v) { return split(v[a], 1, d)[static_cast<size_t>(which % n)].contiguous(); });
      }
    }
  }

  bool matmul_op() {
    const int a = pick_rank(1);
    if (a < 0) return false;
    const Shape s = shape(a);
    const int64_t k = s.back(), m = 1 + ch_.below(3);
    switch (ch_.below(4)) {
      case 0: {
        const int b = leaf({k, m});
        return add(fmt::format("matmul(t{}, t{})", a, b), {a, b}, [=](const Values& v) { return matmul(v[a], v[b]); });
      }
      case 1: {  // b first: [m, k] @ a viewed as [..., k, n]
        if (s.size() < 2) return false;
        const int b = leaf({m, s[s.size() - 2]});
        return add(fmt::format("matmul(t{}, t{})", b, a), {a, b}, [=](const Values& v) { return matmul(v[b], v[a]); });
      }
      case 2: {  // batched, broadcasting the batch dims
        Shape bs = broadcastable(Shape(s.begin(), s.end() - std::min<ptrdiff_t>(2, static_cast<ptrdiff_t>(s.size()))));
        bs.push_back(k);
        bs.push_back(m);
        if (numel_of(bs) > 24) return false;
        const int b = leaf(bs);
        return add(fmt::format("matmul(t{}, t{})", a, b), {a, b}, [=](const Values& v) { return matmul(v[a], v[b]); });
      }
      default: {
        const int w = leaf({m, k});
        const bool with_bias = ch_.coin(0.5);
        const int bias = with_bias ? leaf({m}) : -1;
        return add(fmt::format("linear(t{}, t{}, {})", a, w, with_bias ? fmt::format("t{}", bias) : "none"),
                   bias >= 0 ? std::vector<int>{a, w, bias} : std::vector<int>{a, w}, [=](const Values& v) {
                     return linear(v[a], v[w], bias >= 0 ? v[bias] : Tensor());
                   });
      }
    }
  }

  bool normalize() {
    const int a = pick_rank(1);
    if (a < 0) return false;
    const int64_t rank = value(a).dim();
    switch (ch_.below(3)) {
      case 0: {
        const int64_t d = ch_.below(rank) - (ch_.coin(0.5) ? rank : 0);
        return add(fmt::format("softmax(t{}, {})", a, d), {a}, [=](const Values& v) { return softmax(v[a], d); });
      }
      case 1: {
        const int64_t d = ch_.below(rank);
        return add(fmt::format("log_softmax(t{}, {})", a, d), {a}, [=](const Values& v) { return log_softmax(v[a], d); });
      }
      default: {
        const Shape s = shape(a);
        const Shape norm(s.end() - 1 - (rank >= 2 && ch_.coin(0.3) ? 1 : 0), s.end());
        if (numel_of(norm) < 2) return false;
        const bool affine = ch_.coin(0.6);
        const int w = affine ? leaf(norm) : -1, b = affine ? leaf(norm) : -1;
        return add(fmt::format("layer_norm(t{}, {}{})", a, norm, affine ? fmt::format(", t{}, t{}", w, b) : ""),
                   affine ? std::vector<int>{a, w, b} : std::vector<int>{a}, [=](const Values& v) {
                     return affine ? layer_norm(v[a], norm, v[w], v[b]) : layer_norm(v[a], norm);
                   });
      }
    }
  }

  bool indexing() {
    const int a = pick_rank(1);
    if (a < 0) return false;
    const Shape s = shape(a);
    const int64_t d = dim_of(a), n = s[static_cast<size_t>(d)];
    switch (ch_.below(3)) {
      case 0: {
        const Tensor idx = random_index(n, {1 + ch_.below(4)});
        return add(fmt::format("index_select(t{}, {}, {})", a, d, idx.to_vector<int64_t>()), {a},
                   [=](const Values& v) { return index_select(v[a], d, idx); });
      }
      case 1: {
        Shape is = s;
        for (size_t k = 0; k < is.size(); ++k) is[k] = static_cast<int64_t>(k) == d ? 1 + ch_.below(3) : 1 + ch_.below(is[k]);
        const Tensor idx = random_index(n, is);
        return add(fmt::format("gather(t{}, {}, index {})", a, d, is), {a},
                   [=](const Values& v) { return gather(v[a], d, idx); });
      }
      default: {
        if (s.size() != 2) return false;
        // (padding_idx is left out: its row gets no gradient by definition, as in PyTorch.)
        const Tensor ids = random_index(s[0], random_shape(2));
        return add(fmt::format("embedding(t{}, ids {})", a, ids.shape()), {a},
                   [=](const Values& v) {
                     return embedding(v[a], ids);
                   });
      }
    }
  }

  bool loss() {
    const int a = pick_rank(1);
    if (a < 0) return false;
    const int64_t V = shape(a).back(), rows = value(a).numel() / V;
    switch (ch_.below(3)) {
      case 0: {
        CrossEntropyOptions o;
        o.label_smoothing = ch_.coin(0.5) ? 0.1 : 0.0;
        o.reduction = ch_.coin(0.7) ? Reduction::mean : Reduction::sum;
        const Shape lead(shape(a).begin(), shape(a).end() - 1);
        Tensor t = random_index(V, lead);
        if (ch_.coin(0.3) && rows > 1) {  // one ignored row
          auto ids = t.to_vector<int64_t>();
          ids[0] = o.ignore_index;
          t = Tensor::from_vector(ids, lead);
        }
        return add(fmt::format("cross_entropy(t{}, targets {}, smoothing {})", a, t.to_vector<int64_t>(),
                               o.label_smoothing),
                   {a}, [=](const Values& v) { return cross_entropy(v[a], t, o); });
      }
      case 1: {
        const Tensor t = random_index(V, Shape(shape(a).begin(), shape(a).end() - 1));
        return add(fmt::format("nll_loss(log_softmax(t{}, -1), {})", a, t.to_vector<int64_t>()), {a},
                   [=](const Values& v) { return nll_loss(log_softmax(v[a], -1), t); });
      }
      default: {
        const int b = leaf(shape(a));
        return add(fmt::format("mse_loss(t{}, t{})", a, b), {a, b}, [=](const Values& v) { return mse_loss(v[a], v[b]); });
      }
    }
  }

  bool attention() {
    const int64_t B = 1 + ch_.below(2), H = 1 + ch_.below(2), T = 1 + ch_.below(3), S = 1 + ch_.below(3),
                  D = 1 + ch_.below(3);
    int q = pick([&](int i) { return value(i).dim() == 4; });
    if (q < 0) q = leaf({B, H, T, D});
    const Shape qs = shape(q);
    const int k = leaf({qs[0], qs[1], S, qs[3]}), v = leaf({qs[0], qs[1], S, 1 + ch_.below(3)});
    AttentionOptions o;
    o.is_causal = ch_.coin(0.3);
    if (ch_.coin(0.3)) {
      o.key_padding_mask = random_mask({qs[0], S});
      auto m = o.key_padding_mask.to_vector<bool>();
      m[0] = false;  // some key visible in the first row
      o.key_padding_mask = Tensor::from_vector(m, {qs[0], S});
    }
    const bool fused = ch_.coin(0.7);
    return add(fmt::format("{}attention(t{}, t{}, t{}{}{})", fused ? "" : "composite ", q, k, v,
                           o.is_causal ? ", causal" : "", o.key_padding_mask.defined() ? ", key padding" : ""),
               {q, k, v}, [=](const Values& x) {
                 return fused ? scaled_dot_product_attention(x[q], x[k], x[v], o).out
                              : scaled_dot_product_attention_composite(x[q], x[k], x[v], o).out;
               });
  }

  // Output: a lone small sink as it is (a non-scalar output), otherwise the
  // sinks weighted by fixed random tensors and summed.
  void finish() {
    std::vector<bool> used(g_.entries.size(), false);
    for (const auto& e : g_.entries)
      for (int u : e.uses) used[static_cast<size_t>(u)] = true;
    std::vector<int> sinks;
    for (int i = 0; i < static_cast<int>(used.size()); ++i)
      if (!used[static_cast<size_t>(i)]) sinks.push_back(i);
    if (sinks.size() == 1 && value(sinks[0]).numel() <= 6) {
      const int s = sinks[0];
      g_.output = [s](const Values& v) { return v[static_cast<size_t>(s)]; };
      return;
    }
    std::vector<Tensor> weights;
    for (int s : sinks) weights.push_back(Tensor::randn(shape(s), gen_, DType::f64));
    g_.output = [sinks, weights](const Values& v) {
      Tensor total = Tensor::scalar(0.0, DType::f64);
      for (size_t i = 0; i < sinks.size(); ++i) total = total + sum(v[static_cast<size_t>(sinks[i])] * weights[i]);
      return total;
    };
  }

  Choices ch_;
  Generator gen_;
  Graph g_;
  Values values_;
};

struct GraphOutcome {
  bool ok = true;
  std::string report;
};

GraphOutcome check_graph(uint64_t seed) {
  Graph g = Builder(seed).build();
  GraphOutcome o;
  try {
    GradcheckReport r = gradcheck([&g](const Values& in) { return g.evaluate(in); }, g.inputs);
    o.ok = r.ok;
    if (!r.ok) o.report = r.summary();
  } catch (const std::exception& e) {
    o.ok = false;
    o.report = std::string("threw: ") + e.what();
  }
  if (!o.ok)
    o.report = fmt::format("seed {} (rerun: ATTOGRAD_GRAPH_SEED={})\n{}{}", seed, seed, g.describe(), o.report);
  return o;
}

TEST(RandomGraphs, GradcheckHundredsOfRandomCompositions) {
  uint64_t first = 1, count = 500;
  if (const char* s = std::getenv("ATTOGRAD_GRAPH_SEED")) {
    first = std::strtoull(s, nullptr, 10);
    count = 1;
  }
  uint64_t checked = 0, failed = 0;
  for (uint64_t seed = first; seed < first + count && failed < 5; ++seed, ++checked) {  // 5 failures are enough
    const GraphOutcome o = check_graph(seed);
    if (!o.ok) {
      ++failed;
      ADD_FAILURE() << o.report;
    }
  }
  std::printf("random graphs: %llu gradchecked in float64 (seeds %llu..%llu), %llu failed\n",
              static_cast<unsigned long long>(checked), static_cast<unsigned long long>(first),
              static_cast<unsigned long long>(first + checked - 1), static_cast<unsigned long long>(failed));
}

// The builder is a function of the seed: the same seed gives the same graph.
TEST(RandomGraphs, SameSeedSameGraph) {
  EXPECT_EQ(Builder(42).build().describe(), Builder(42).build().describe());
  EXPECT_NE(Builder(42).build().describe(), Builder(43).build().describe());
}

}  // namespace
}  // namespace attograd
