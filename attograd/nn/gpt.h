// A decoder-only Transformer language model (GPT-2's layout), batch-first.
//
// Shape legend: B batch, T sequence length (≤ context), E = d_model,
// F = d_ff, H heads, G = kv_heads (K/V heads, dividing H), D = E / H, V vocab;
// ids are i64 [B, T].
//   GPT.forward(ids [B, T]) -> logits [B, T, V]
//
//   x = Drop(TokEmbed(ids) + Pos(0..T-1))
//   per block (pre-LN):  x = x + Drop(CausalSelfAttn(LN1(x)));  x = x + Drop(MLP(LN2(x)))
//   logits = LNf(x) · Wᵀ     (W = TokEmbed.weight when tied, else a bias-free Linear)
//   MLP(x) = Linear2(Drop(GELU(Linear1(x))))    (GELU in its exact erf form)
//
// Init (GPTInit):
//   pytorch: every module's PyTorch default (Embedding N(0, 1), Linear U(±1/√in),
//            MultiheadAttention xavier with zero biases);
//   gpt2:    GPT-2's: weights of Linear and Embedding N(0, 0.02²), biases 0, and the
//            two residual projections of each block (attention out_proj, MLP linear2)
//            N(0, (0.02/√(2·layers))²).
//
// Grouped-query attention (kv_heads = G < H): each block's k_proj and v_proj
// give G·D features and each group of H/G query heads shares one K/V head, so
// the KV cache keeps G·D keys and values per position and layer, H/G times
// less than multi-head attention (G = H, the default).
//
// causal = false drops the causal mask: every position sees every other. Only
// a control: trained on next-token prediction, position t then reads token
// t + 1, its own target, through the attention, so the loss collapses
// towards 0 without anything being learned that can generate. Decoding with a
// KV cache needs the mask (a position's keys and values would change with
// every later token), so decode_step and a cached forward refuse such a model.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include <attograd/nn/attention.h>
#include <attograd/nn/embedding.h>
#include <attograd/nn/layers.h>
#include <attograd/nn/linear.h>
#include <attograd/nn/transformer.h>

namespace attograd {

// How GPT draws its initial weights: each module's PyTorch default, or
// GPT-2's scheme (Init in the file comment).
enum class GPTInit { pytorch, gpt2 };

// The model's shape and options; checkpoints store it as JSON.
struct GPTConfig {
  int64_t vocab = 256;  // V: token ids are in [0, vocab), and logits have V classes
  int64_t context = 128;   // longest sequence (positions)
  int64_t d_model = 128;  // E, the model width
  int64_t heads = 4;      // H, dividing d_model
  // G, the K/V heads of every block's attention (grouped-query attention,
  // dividing heads); heads when unset (multi-head attention). Checkpoints
  // without it are multi-head.
  std::optional<int64_t> kv_heads;
  // G: kv_heads, or heads when unset.
  int64_t kv_head_count() const { return kv_heads.value_or(heads); }
  int64_t d_ff = 512;     // F, the MLP's hidden width
  int64_t layers = 4;     // the number of blocks
  double dropout = 0.0;  // every dropout's probability (embeddings, attention, residuals, MLP), in [0, 1)
  PositionalEncoding::Kind positions = PositionalEncoding::Kind::learned;  // learned position table or fixed sinusoids
  bool tie_embeddings = true;  // lm_head uses tok_embed.weight (W = TokEmbed.weight), no weight of its own
  GPTInit init = GPTInit::pytorch;  // the initial weights' scheme (Init in the file comment)
  double layer_norm_eps = 1e-5;  // eps of every LayerNorm; optional in JSON
  // The attention's causal mask (position t sees positions ≤ t). false is a
  // control only (see the file comment: the next-token loss collapses, and
  // nothing cached can decode). Optional in JSON: checkpoints without it are causal.
  bool causal = true;

  // ValueError naming the bad field: sizes positive and at most
  // config_sizes' limits (attograd/nn/config_sizes.h), so no size computed from them overflows.
  void validate() const;
  // The model's parameters (a tied matrix once), from the config alone:
  // GPT(c).num_parameters() without building it.
  int64_t parameter_count() const;
  // The elements of GPT(c).state_dict() (a tied matrix under both its names).
  int64_t state_numel() const;
  // Every field by name (positions and init as strings), as checkpoints store it.
  nlohmann::json to_json() const;
  // The inverse of to_json, validated; a missing field (all but layer_norm_eps,
  // kv_heads and causal are required), a bad value or an unknown positions or
  // init is a ValueError.
  static GPTConfig from_json(const nlohmann::json& j);
};

// One pre-LN block: (causal) self-attention then the GELU MLP, each in a residual.
class GPTBlock : public Module {
 public:
  // A block of shape c; gen draws the initial weights, dropout_gen the dropout
  // masks (may be null only when c.dropout is 0).
  GPTBlock(const GPTConfig& c, Generator& gen, std::shared_ptr<Generator> dropout_gen);
  // x [B, T, E] -> [B, T, E]. With a cache, x holds only the new step(s).
  Tensor forward(const Tensor& x, AttentionCache* cache = nullptr);
  // forward's decode step (attograd/nn/inference.h) on the stream x [n, E] of the rows
  // of `rows`, in place: cache prepared (this step's row reserved), t its
  // length with this step; w: the block's packed weights.
  template <class T>
  void step_rows(StepState& s, const StepLayer& w, const Tensor& x, AttentionCache& cache, int64_t t,
                 RowBlock rows) const;
  // LN1, the LayerNorm over E before attention; ln2 is LN2, before the MLP.
  std::shared_ptr<LayerNorm> ln1, ln2;  // LN2, before the MLP
  std::shared_ptr<MultiHeadAttention> attn;  // self-attention, E wide with H query heads and G K/V heads
  std::shared_ptr<FeedForward> mlp;  // E -> F -> E with the exact GELU and dropout between
  // On the attention output, before its residual add; drop2 likewise for the MLP.
  std::shared_ptr<Dropout> drop1, drop2;  // on the MLP output, before its residual add
  bool causal;  // the self-attention's causal mask (GPTConfig::causal)
};

// The whole model: token and position embeddings, the blocks, a final
// LayerNorm and the output projection to V logits.
class GPT : public Module {
 public:
  // The model for config c (validated: ValueError naming a bad field); gen draws
  // the initial weights, dropout_gen the dropout masks (seeded from gen when null).
  GPT(const GPTConfig& c, Generator& gen, std::shared_ptr<Generator> dropout_gen = nullptr);
  // ids [B, T] -> logits [B, T, V]. With a cache (make_cache()), ids are the
  // new tokens only, their positions start at cache->length(), and the cache
  // grows by T (a ValueError for a model without the causal mask).
  Tensor forward(const Tensor& ids, KVCache* cache = nullptr);
  // One cached decoding step without the graph, the inference path (the LM's
  // sampling takes it): ids [B] (each row's newest token) -> logits [B, V],
  // equal to forward()'s for the same cache. Needs grad mode off, eval mode,
  // no attention observer, float contiguous weights, a position left in
  // the context and a causal model: otherwise an error naming the failed
  // condition. The cache keeps G heads per layer. A step reads
  // the weights as they are now, even after an in-place update
  // (Tensor::version()); the keys and values cached before it stay the old
  // weights' (reset() the cache to recompute them).
  Tensor decode_step(std::span<const int64_t> ids, KVCache& cache);
  // An empty cache with one self-attention cache per block, for incremental
  // decoding with forward.
  KVCache make_cache() const { return KVCache(blocks->size()); }

  GPTConfig config;  // the validated config the model was built from
  std::shared_ptr<Embedding> tok_embed;  // [V, E] token embeddings (lm_head's weight too when tied)
  std::shared_ptr<PositionalEncoding> pos;  // positions [0, context), kind config.positions
  std::shared_ptr<Dropout> drop;  // on the summed token and position embeddings
  std::shared_ptr<ModuleList<GPTBlock>> blocks;  // config.layers GPTBlocks, applied in order
  std::shared_ptr<LayerNorm> ln_f;  // LNf, the final LayerNorm before lm_head
  std::shared_ptr<Linear> lm_head;  // its weight is tok_embed.weight when tied

 protected:
  std::string extra_repr() const override;

 private:
  void init_gpt2(Generator& gen);
};

}  // namespace attograd
