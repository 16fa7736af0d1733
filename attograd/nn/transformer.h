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
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <attograd/nn/attention.h>
#include <attograd/nn/embedding.h>
#include <attograd/nn/inference.h>
#include <attograd/nn/layers.h>
#include <attograd/nn/linear.h>

namespace attograd {

// The feed-forward block's nonlinearity.
enum class Activation { relu, gelu };

// The model's shape and options; checkpoints store it as JSON.
struct TransformerConfig {
  // Source vocabulary size V_src (src ids in [0, V_src)).
  int64_t src_vocab = 16, tgt_vocab = 16;  // target vocabulary size V_tgt (logits width)
  int64_t d_model = 64;  // model width E (embeddings, attention, residual stream); heads must divide it
  int64_t heads = 4;     // query heads H
  int64_t d_ff = 256;    // F, the feed-forward hidden width
  // K/V heads G of the decoder's self- and cross-attention (grouped-query
  // attention, as Ainslie et al. 2023 apply it: the encoder keeps no cache and
  // stays multi-head); divides heads, heads when unset.
  std::optional<int64_t> kv_heads;
  // G: kv_heads, or heads when unset.
  int64_t decoder_kv_heads() const { return kv_heads.value_or(heads); }
  // Number of encoder layers.
  int64_t enc_layers = 2, dec_layers = 2;  // number of decoder layers
  double dropout = 0.1;  // dropout probability of attention, residual, FFN and embedding dropout (0 = none)
  int64_t max_len = 256;  // longest source or target sequence (positional table size); decode max_len stays below it
  bool pre_ln = true;  // true: pre-LN (LayerNorm before each sublayer, final LN per stack); false: post-LN
  bool tie_embeddings = false;  // generator shares the target embedding matrix
  Activation activation = Activation::relu;  // feed-forward nonlinearity (ReLU or GELU)
  int64_t pad_id = 0;           // embedding padding_idx (its row gets no gradient)
  double layer_norm_eps = 1e-5;  // epsilon added to the variance in every LayerNorm
  // The decoder's self-attention is causal: target position t sees positions
  // ≤ t, as a model trained to predict token t + 1 from tokens ≤ t must, since
  // incremental decoding has nothing later to give it. false lets teacher
  // forcing see the whole target (for studies of what the mask does: such a
  // model learns to copy its next input and then cannot decode). Checkpoints
  // without the field are causal.
  bool causal_decoder = true;

  // ValueError naming the bad field: sizes positive and at most
  // config_sizes' limits (attograd/nn/config_sizes.h), so no size computed from them overflows.
  void validate() const;
  // The model's parameters (a tied matrix once), from the config alone:
  // Seq2SeqTransformer(c).num_parameters() without building it.
  int64_t parameter_count() const;
  // The elements of Seq2SeqTransformer(c).state_dict() (a tied matrix under both its names).
  int64_t state_numel() const;
  // Every field by name, as checkpoints store the model's shape.
  nlohmann::json to_json() const;
  // The inverse of to_json, validated; a missing field (all but layer_norm_eps
  // are required), a bad value or an unknown activation is a ValueError.
  static TransformerConfig from_json(const nlohmann::json& j);
};

// What to_grouped_query gives: the converted model's config and parameters.
struct GroupedQueryModel {
  TransformerConfig config;  // kv_heads set
  TensorMap state;  // parameters by name, decoder k_proj/v_proj pooled to kv_heads groups
};
// A model's parameters converted to grouped-query attention (Ainslie et al.
// 2023): each decoder layer's self- and cross-attention k_proj, v_proj mean-
// pooled from the config's decoder_kv_heads() to kv_heads groups (see
// mean_pool_kv_heads); every other tensor unchanged. kv_heads must divide the
// current K/V heads (so a multi-head model converts to any divisor of heads);
// ValueError when it does not, or when state lacks a decoder k_proj/v_proj tensor.
GroupedQueryModel to_grouped_query(const TransformerConfig& c, const TensorMap& state,
                                   int64_t kv_heads);

// The position-wise feed-forward block: Linear2(Drop(act(Linear1(x)))).
class FeedForward : public UnaryModule {
 public:
  // d_model -> d_ff -> d_model with act between; dropout_gen draws the dropout masks.
  FeedForward(int64_t d_model, int64_t d_ff, double dropout, Activation act, Generator& gen,
              std::shared_ptr<Generator> dropout_gen, DType dtype = DType::f32);
  // x [B, T, E] -> [B, T, E] (any leading dims).
  Tensor forward(const Tensor& x) override;
  // forward's decode step (attograd/nn/inference.h): x [n, E] += Linear2(act(Linear1(in)))
  // for the rows of `rows` (in [n, E] may be x); w: the layer's packed weights.
  template <class T>
  void step_rows(StepState& s, const StepLayer& w, const T* in, T* x, RowBlock rows) const;
  // First projection E -> F (before the activation).
  std::shared_ptr<Linear> linear1, linear2;  // second projection F -> E (after dropout)
  std::shared_ptr<Dropout> drop;  // dropout between the activation and linear2 (registered as "dropout")
  Activation activation;  // nonlinearity applied to linear1's output
};

// Self-attention then feed-forward, each in a residual (pre-LN or post-LN).
class TransformerEncoderLayer : public Module {
 public:
  // One layer of shape c (see validate()); gen draws the initial weights,
  // dropout_gen the dropout masks.
  TransformerEncoderLayer(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dropout_gen);
  // x [B, S, E]; key_padding_mask [B, S] (true at padding) may be undefined.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask);
  bool pre_ln;  // pre-LN (LayerNorm before each sublayer) or post-LN; from the config
  std::shared_ptr<MultiHeadAttention> self_attn;  // self-attention over the source, c.heads heads
  std::shared_ptr<FeedForward> ff;  // the position-wise feed-forward block
  // LayerNorm of the self-attention sublayer (its input in pre-LN, the residual sum in post-LN).
  std::shared_ptr<LayerNorm> norm1, norm2;  // LayerNorm of the feed-forward sublayer
  // Dropout on the self-attention output before the residual add.
  std::shared_ptr<Dropout> dropout1, dropout2;  // dropout on the feed-forward output before the residual add
};

// Per-layer attention caches for incremental decoding: what the decoder keeps.
struct KVCache {
  std::vector<AttentionCache> self_attn;   // K, V [B, G, t, D] per layer, one row per decoded step
  std::vector<AttentionCache> cross_attn;  // K, V [B, G, S, D] per layer, projected from memory once
  std::shared_ptr<StepState> step;  // decode_step's buffers and packed weights (attograd/nn/inference.h); null until its first step
  // Empty caches for a decoder of `layers` layers (Seq2SeqTransformer::make_cache).
  explicit KVCache(size_t layers = 0);
  // Empties every cache for a new batch.
  void reset();
  // Beam search: row i of every self-attention cache becomes old row origin[i].
  void reorder(const std::vector<int64_t>& origin);
  // Steps decoded so far (t): where the next position starts.
  int64_t length() const { return self_attn.empty() ? 0 : self_attn[0].length; }
  // Layer i's two caches, as TransformerDecoderLayer::forward takes them.
  struct Layer {
    AttentionCache* self_attn = nullptr;  // this layer's self-attention cache; null without a cache
    AttentionCache* cross_attn = nullptr;  // this layer's cross-attention cache; null without a cache
  };
  // Layer i's caches; i out of range throws std::out_of_range.
  Layer layer(size_t i) { return {&self_attn.at(i), &cross_attn.at(i)}; }
  // Bytes of the valid K/V rows over all layers.
  size_t bytes_used() const;
  // Bytes held, spare capacity included.
  size_t bytes_allocated() const;
};

// What every decoder layer reads besides its input x [B, T, E].
struct DecoderInputs {
  Tensor memory;                   // [B, S, E], the encoder's output
  Tensor tgt_key_padding_mask;     // [B, T] b8, true at padding; may be undefined (unused with a cache)
  Tensor memory_key_padding_mask;  // [B, S] b8, true at padding; may be undefined
};

// Masked self-attention, cross-attention to the memory, then feed-forward,
// each in a residual (pre-LN or post-LN).
class TransformerDecoderLayer : public Module {
 public:
  // One layer of shape c; gen draws the initial weights, dropout_gen the dropout masks.
  TransformerDecoderLayer(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dropout_gen);
  // x [B, T, E] -> [B, T, E]. With caches, x holds only the new step(s) and
  // the caches hold everything before.
  Tensor forward(const Tensor& x, const DecoderInputs& in, KVCache::Layer cache = {});
  // forward's decode step (attograd/nn/inference.h) on the stream x [n, E] of the rows
  // of `rows`: this layer's caches prepared (the self-attention's row
  // reserved, t its length with this step; the cross-attention's filled);
  // returns the new stream (x itself in pre-LN).
  template <class T>
  Tensor step_rows(StepState& s, const StepLayer& w, Tensor x, int64_t t, const PaddingRows& pad,
                   KVCache::Layer cache, RowBlock rows) const;
  bool pre_ln;  // pre-LN (LayerNorm before each sublayer) or post-LN; from the config
  bool causal;  // the self-attention's causal mask (TransformerConfig::causal_decoder)
  // Masked (causal) self-attention over the target, with decoder_kv_heads() K/V heads.
  std::shared_ptr<MultiHeadAttention> self_attn, cross_attn;  // cross-attention to the memory, same heads
  std::shared_ptr<FeedForward> ff;  // the position-wise feed-forward block
  std::shared_ptr<LayerNorm> norm1;  // LayerNorm of the self-attention sublayer
  std::shared_ptr<LayerNorm> norm2;  // LayerNorm of the cross-attention sublayer
  std::shared_ptr<LayerNorm> norm3;  // LayerNorm of the feed-forward sublayer
  std::shared_ptr<Dropout> dropout1;  // dropout on the self-attention output before the residual add
  std::shared_ptr<Dropout> dropout2;  // dropout on the cross-attention output before the residual add
  std::shared_ptr<Dropout> dropout3;  // dropout on the feed-forward output before the residual add
};

// A stack of encoder layers, with a final LayerNorm in pre-LN.
class TransformerEncoder : public Module {
 public:
  // c.enc_layers layers; gen draws the initial weights, dropout_gen the masks.
  TransformerEncoder(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dropout_gen);
  // x [B, S, E], key_padding_mask [B, S] (or undefined) -> memory [B, S, E].
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask);
  std::shared_ptr<ModuleList<TransformerEncoderLayer>> layers;  // the c.enc_layers encoder layers, applied in order
  std::shared_ptr<LayerNorm> norm;  // pre-LN only
};

// A stack of decoder layers, with a final LayerNorm in pre-LN.
class TransformerDecoder : public Module {
 public:
  // c.dec_layers layers; gen draws the initial weights, dropout_gen the masks.
  TransformerDecoder(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dropout_gen);
  // x [B, T, E] -> [B, T, E]; with a cache, x is the new step(s) and the cache
  // grows by them.
  Tensor forward(const Tensor& x, const DecoderInputs& in, KVCache* cache = nullptr);
  std::shared_ptr<ModuleList<TransformerDecoderLayer>> layers;  // the c.dec_layers decoder layers, applied in order
  std::shared_ptr<LayerNorm> norm;  // pre-LN only
};

// The whole encoder-decoder: embeddings, positional encoding, encoder, decoder
// and the generator (the output projection to V_tgt logits).
//
// Initialisation: every layer as PyTorch initialises it, but the token
// embeddings start at N(0, 1/E), as fairseq's Transformer starts them, not at
// nn.Embedding's N(0, 1). Scaled by √E in encode/decode, a token then has unit
// variance, as the sinusoids do; at N(0, 1) it would enter the residual stream
// with standard deviation √E (11 at E = 128), drowning the positions, and
// every pre-LN sublayer would add a unit-size change to it, so the model
// barely moves from its input embeddings (on the gettext fr corpus: test BLEU
// 12.6 after 1,500 steps from N(0, 1), docs/translate.md).
class Seq2SeqTransformer : public Module {
 public:
  // The whole model for config c (validated: ValueError naming a bad field);
  // gen draws the initial weights, dropout_gen the dropout masks.
  Seq2SeqTransformer(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dropout_gen);
  // src [B, S] -> memory [B, S, E]
  Tensor encode(const Tensor& src, const Tensor& src_key_padding_mask = Tensor());
  // tgt [B, T] (or the new step(s) when a cache is given) -> logits [B, T, V_tgt].
  // With a cache, positions start at cache->length().
  Tensor decode(const Tensor& tgt, const Tensor& memory, const Tensor& memory_key_padding_mask = Tensor(),
                const Tensor& tgt_key_padding_mask = Tensor(), KVCache* cache = nullptr);
  // One cached decoding step without the graph, the inference path
  // (greedy_decode and beam_search take it): ids [B] (each row's newest
  // token) -> logits [B, V_tgt], equal to decode()'s for the same cache.
  // memory [B, S, E] is read on the cache's first step (the cross-attention's
  // K/V); memory_key_padding_mask [B, S] b8 may be undefined. Needs grad mode
  // off, eval mode, no attention observer, float contiguous weights and a
  // position left below max_len: otherwise an error naming the failed
  // condition. A step reads the weights as they are now, even after an
  // in-place update (Tensor::version()); the keys and values cached before
  // it stay the old weights' (reset() the cache to recompute them).
  Tensor decode_step(std::span<const int64_t> ids, KVCache& cache, const Tensor& memory,
                     const Tensor& memory_key_padding_mask = Tensor());
  // Teacher forcing: src [B, S], tgt_in [B, T] -> logits [B, T, V_tgt], i.e.
  // decode(tgt_in, encode(src)); the masks are true at padding.
  Tensor forward(const Tensor& src, const Tensor& tgt_in, const Tensor& src_key_padding_mask = Tensor(),
                 const Tensor& tgt_key_padding_mask = Tensor());
  // An empty cache sized for this decoder, for incremental decoding.
  KVCache make_cache() const { return KVCache(decoder->layers->size()); }

  TransformerConfig config;  // the validated config the model was built from
  // Source token embedding [V_src, E], N(0, 1/E) at first (row pad_id gets no gradient); output scaled by √E.
  std::shared_ptr<Embedding> src_embed, tgt_embed;  // target embedding [V_tgt, E] (×√E); generator's weight if tied
  std::shared_ptr<PositionalEncoding> pos;  // sinusoids for positions [0, max_len), added to the scaled embeddings
  std::shared_ptr<Dropout> embed_dropout;  // dropout on the embeddings plus positions, before the encoder and decoder
  std::shared_ptr<TransformerEncoder> encoder;  // the encoder stack: src embeddings -> memory [B, S, E]
  std::shared_ptr<TransformerDecoder> decoder;  // the decoder stack: target embeddings and memory -> [B, T, E]
  std::shared_ptr<Linear> generator;  // output projection E -> V_tgt logits; weight is tgt_embed's when tied

 protected:
  std::string extra_repr() const override;
};

}  // namespace attograd
