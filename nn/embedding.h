// Token embeddings and positional encodings.
// Shape legend: ids [B, T] (i64), weight [V, E], out [B, T, E]; pe [max_len, E].
#pragma once
#include <optional>

#include <attograd/nn/module.h>

namespace attograd {

class Embedding : public Module {
 public:
  // weight ~ N(0, 1) (PyTorch's init); the padding_idx row starts at zero and
  // never receives a gradient.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen,
            std::optional<int64_t> padding_idx = std::nullopt, DType dtype = DType::f32);
  Tensor forward(const Tensor& ids);
  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;
  Tensor weight;  // [V, E]

 protected:
  std::string extra_repr() const override;
};

// Adds a position signal to x [B, T, E]:
//  - sinusoidal (a fixed, non-persistent buffer, as in "Attention Is All You Need"):
//      pe[p, 2i] = sin(p / 10000^(2i/E)),  pe[p, 2i+1] = cos(p / 10000^(2i/E))
//  - learned: a [max_len, E] parameter, N(0, 1) init like Embedding.
// `start` offsets the positions (incremental decoding feeds one step at a time).
class PositionalEncoding : public Module {
 public:
  enum class Kind { sinusoidal, learned };
  PositionalEncoding(int64_t max_len, int64_t dim, Kind kind, Generator& gen, DType dtype = DType::f32);
  Tensor forward(const Tensor& x, int64_t start = 0);
  int64_t max_len, dim;
  Kind kind;
  Tensor table;  // [max_len, E]

 protected:
  std::string extra_repr() const override;
};

}  // namespace attograd
