#include <attograd/nn/embedding.h>

#include <cmath>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/indexing.h>
#include <attograd/autograd/ops/shape.h>
#include <attograd/nn/init.h>

namespace attograd {

Embedding::Embedding(int64_t n, int64_t dim, Generator& gen, std::optional<int64_t> pad, DType dtype)
    : Module("Embedding"), num_embeddings(n), embedding_dim(dim), padding_idx(pad) {
  if (n <= 0 || dim <= 0) fail<ValueError>("Embedding", "sizes must be positive, got {} x {}", n, dim);
  if (pad && (*pad < -n || *pad >= n))
    fail<ValueError>("Embedding", "padding_idx {} is outside [-{}, {})", *pad, n, n);
  if (pad && *pad < 0) padding_idx = *pad + n;
  Tensor w = Tensor::empty({n, dim}, dtype);
  init::normal_(w, 0.0, 1.0, gen);
  if (padding_idx) w.narrow(0, *padding_idx, 1).fill_(0.0);
  weight = register_parameter("weight", w);
}

Tensor Embedding::forward(const Tensor& ids) { return embedding(weight, ids, padding_idx); }

std::string Embedding::extra_repr() const {
  return fmt::format("{}, {}{}", num_embeddings, embedding_dim,
                     padding_idx ? fmt::format(", padding_idx={}", *padding_idx) : "");
}

PositionalEncoding::PositionalEncoding(int64_t len, int64_t d, Kind k, Generator& gen, DType dtype)
    : Module("PositionalEncoding"), max_len(len), dim(d), kind(k) {
  if (len <= 0 || d <= 0) fail<ValueError>("PositionalEncoding", "sizes must be positive, got {} x {}", len, d);
  Tensor t = Tensor::empty({len, d}, dtype);
  if (kind == Kind::learned) {
    init::normal_(t, 0.0, 1.0, gen);
    table = register_parameter("weight", t);
    return;
  }
  std::vector<double> v(static_cast<size_t>(len * d));
  for (int64_t p = 0; p < len; ++p)
    for (int64_t i = 0; i < d; ++i) {
      const double freq = std::pow(10000.0, -static_cast<double>(i - i % 2) / static_cast<double>(d));
      v[p * d + i] = i % 2 == 0 ? std::sin(p * freq) : std::cos(p * freq);
    }
  t.copy_(Tensor::from_vector(v, {len, d}, DType::f64));
  table = register_buffer("pe", t, /*persistent=*/false);
}

Tensor PositionalEncoding::forward(const Tensor& x, int64_t start) {
  const int64_t T = x.size(-2);
  if (start < 0 || start + T > max_len)
    fail<ShapeError>("PositionalEncoding", "positions [{}, {}) exceed max_len {}; hint: raise --max-len or feed "
                     "shorter sequences", start, start + T, max_len);
  if (x.size(-1) != dim)
    fail<ShapeError>("PositionalEncoding", "input {} has feature size {}, expected {}", shape_str(x.shape()), x.size(-1), dim);
  return x + table.narrow(0, start, T);
}

std::string PositionalEncoding::extra_repr() const {
  return fmt::format("max_len={}, dim={}, kind={}", max_len, dim, kind == Kind::learned ? "learned" : "sinusoidal");
}

}  // namespace attograd
