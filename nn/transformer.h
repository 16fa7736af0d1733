// The encoder-decoder Transformer ("Attention Is All You Need"), pre-LN by
// default (post-LN on request), batch-first.
//
// Shape legend: B batch, S source length, T target length, E = d_model,
// F = d_ff, V vocab sizes; src/tgt ids are i64 [B, S] / [B, T].
//   encoder layer:  x [B, S, E] -> [B, S, E]
//   decoder layer:  x [B, T, E], memory [B, S, E] -> [B, T, E]
//   Seq2SeqTransformer.forward(src, tgt_in) -> logits [B, T, V_tgt]
//
// pre-LN:   x = x + Drop(SelfAttn(LN(x)));  x = x + Drop(FFN(LN(x)))    (+ a final LN per stack)
// post-LN:  x = LN(x + Drop(SelfAttn(x))); x = LN(x + Drop(FFN(x)))
// FFN(x) = Linear2(Drop(act(Linear1(x)))), act = ReLU or GELU.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <attograd/nn/attention.h>
#include <attograd/nn/embedding.h>
#include <attograd/nn/layers.h>
#include <attograd/nn/linear.h>

namespace attograd {

enum class Activation { relu, gelu };

struct TransformerConfig {
  int64_t src_vocab = 16, tgt_vocab = 16;
  int64_t d_model = 64, heads = 4, d_ff = 256;
  int64_t enc_layers = 2, dec_layers = 2;
  double dropout = 0.1;
  int64_t max_len = 256;
  bool pre_ln = true;
  bool tie_embeddings = false;  // generator shares the target embedding matrix
  Activation activation = Activation::relu;
  int64_t pad_id = 0;           // embedding padding_idx (its row gets no gradient)
  double layer_norm_eps = 1e-5;

  void validate() const;        // ValueError naming the bad field
  nlohmann::json to_json() const;
  static TransformerConfig from_json(const nlohmann::json& j);
};

class FeedForward : public UnaryModule {
 public:
  FeedForward(int64_t d_model, int64_t d_ff, double dropout, Activation act, Generator& gen,
              std::shared_ptr<Generator> dropout_gen, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> drop;
  Activation activation;
};

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dropout_gen);
  // x [B, S, E]; key_padding_mask [B, S] (true at padding) may be undefined.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask);
  bool pre_ln;
  std::shared_ptr<MultiHeadAttention> self_attn;
  std::shared_ptr<FeedForward> ff;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;
};

// Per-layer attention caches for incremental decoding: what the decoder keeps.
struct KVCache {
  std::vector<AttentionCache> self_attn;   // K, V [B, H, t, D] per layer, one row per decoded step
  std::vector<AttentionCache> cross_attn;  // K, V [B, H, S, D] per layer, projected from memory once
  explicit KVCache(size_t layers = 0);
  void reset();
  // Beam search: row i of every self-attention cache becomes old row origin[i].
  void reorder(const std::vector<int64_t>& origin);
  int64_t length() const { return self_attn.empty() ? 0 : self_attn[0].length; }
  // Layer i's two caches, as TransformerDecoderLayer::forward takes them.
  struct Layer {
    AttentionCache* self_attn = nullptr;
    AttentionCache* cross_attn = nullptr;
  };
  Layer layer(size_t i) { return {&self_attn.at(i), &cross_attn.at(i)}; }
  size_t bytes_used() const;
  size_t bytes_allocated() const;
};

// What every decoder layer reads besides its input x [B, T, E].
struct DecoderInputs {
  Tensor memory;                   // [B, S, E], the encoder's output
  Tensor tgt_key_padding_mask;     // [B, T] b8, true at padding; may be undefined (unused with a cache)
  Tensor memory_key_padding_mask;  // [B, S] b8, true at padding; may be undefined
};

class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dropout_gen);
  // x [B, T, E] -> [B, T, E]. With caches, x holds only the new step(s) and
  // the caches hold everything before.
  Tensor forward(const Tensor& x, const DecoderInputs& in, KVCache::Layer cache = {});
  bool pre_ln;
  std::shared_ptr<MultiHeadAttention> self_attn, cross_attn;
  std::shared_ptr<FeedForward> ff;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  std::shared_ptr<Dropout> dropout1, dropout2, dropout3;
};

// A stack of encoder layers, with a final LayerNorm in pre-LN.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dropout_gen);
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask);
  std::shared_ptr<ModuleList<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // pre-LN only
};

// A stack of decoder layers, with a final LayerNorm in pre-LN.
class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dropout_gen);
  Tensor forward(const Tensor& x, const DecoderInputs& in, KVCache* cache = nullptr);
  std::shared_ptr<ModuleList<TransformerDecoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // pre-LN only
};

class Seq2SeqTransformer : public Module {
 public:
  Seq2SeqTransformer(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dropout_gen);
  // src [B, S] -> memory [B, S, E]
  Tensor encode(const Tensor& src, const Tensor& src_key_padding_mask = Tensor());
  // tgt [B, T] (or the new step(s) when a cache is given) -> logits [B, T, V_tgt].
  // With a cache, positions start at cache->length().
  Tensor decode(const Tensor& tgt, const Tensor& memory, const Tensor& memory_key_padding_mask = Tensor(),
                const Tensor& tgt_key_padding_mask = Tensor(), KVCache* cache = nullptr);
  Tensor forward(const Tensor& src, const Tensor& tgt_in, const Tensor& src_key_padding_mask = Tensor(),
                 const Tensor& tgt_key_padding_mask = Tensor());
  KVCache make_cache() const { return KVCache(decoder->layers->size()); }

  TransformerConfig config;
  std::shared_ptr<Embedding> src_embed, tgt_embed;
  std::shared_ptr<PositionalEncoding> pos;
  std::shared_ptr<Dropout> embed_dropout;
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
  std::shared_ptr<Linear> generator;

 protected:
  std::string extra_repr() const override;
};

}  // namespace attograd
