// Token embeddings and positional encodings.
// Shape legend: ids [B, T] (i64), weight [V, E], out [B, T, E]; pe [max_len, E].
#pragma once
#include <optional>

#include <attograd/nn/module.h>

namespace attograd {

// A lookup table of V vectors of width E: ids [*] -> [*, E] (nn.Embedding).
class Embedding : public Module {
 public:
  // weight ~ N(0, 1) (PyTorch's init); the padding_idx row starts at zero and
  // never receives a gradient.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen,
            std::optional<int64_t> padding_idx = std::nullopt, DType dtype = DType::f32);
  // ids [B, T] i64 (any shape [*]) -> [B, T, E]: the rows weight[ids]. An id
  // outside [0, V) is an IndexError.
  Tensor forward(const Tensor& ids);
  // V, the number of vectors (ids are in [0, V)); embedding_dim is their width E.
  int64_t num_embeddings, embedding_dim;  // E, the width of each vector
  std::optional<int64_t> padding_idx;  // row kept at zero with no gradient, in [0, V) (negative: from V); or none
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
  // Fixed sinusoids, or a learned table.
  enum class Kind { sinusoidal, learned };
  // A table for positions [0, max_len) of width dim; sizes must be positive (ValueError).
  PositionalEncoding(int64_t max_len, int64_t dim, Kind kind, Generator& gen, DType dtype = DType::f32);
  // x [B, T, E] -> x + pe[start : start + T]; positions past max_len or a width
  // other than dim are a ShapeError.
  Tensor forward(const Tensor& x, int64_t start = 0);
  // The number of positions in the table: start + T must not exceed it. dim is its width E.
  int64_t max_len, dim;  // E, the width of the table and of the x it takes
  Kind kind;  // fixed sinusoids (a buffer) or a learned table (a parameter)
  Tensor table;  // [max_len, E]

 protected:
  std::string extra_repr() const override;
};

}  // namespace attograd
