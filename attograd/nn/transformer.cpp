#include <attograd/nn/transformer.h>

#include <cmath>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/indexing.h>
#include <attograd/nn/config_sizes.h>

namespace attograd {

// ---- config -------------------------------------------------------------------------

void TransformerConfig::validate() const {
  using namespace config_sizes;
  check_range("TransformerConfig", "src_vocab", src_vocab, 1, kMaxVocab);
  check_range("TransformerConfig", "tgt_vocab", tgt_vocab, 1, kMaxVocab);
  check_range("TransformerConfig", "d_model", d_model, 1, kMaxWidth);
  check_range("TransformerConfig", "heads", heads, 1, d_model);
  check_range("TransformerConfig", "d_ff", d_ff, 1, kMaxFFWidth);
  check_range("TransformerConfig", "max_len", max_len, 1, kMaxLength);
  check_range("TransformerConfig", "enc_layers", enc_layers, 0, kMaxLayers);
  check_range("TransformerConfig", "dec_layers", dec_layers, 1, kMaxLayers);
  if (d_model % heads != 0)
    fail<ValueError>("TransformerConfig", "heads ({}) must divide d_model ({}); hint: try heads = {}", heads, d_model,
                     d_model % 4 == 0 ? 4 : 1);
  if (kv_heads && (*kv_heads <= 0 || heads % *kv_heads != 0))
    fail<ValueError>("TransformerConfig", "kv_heads ({}) must be positive and divide heads ({}); hint: kv_heads = {} "
                     "is multi-head, 1 multi-query attention", *kv_heads, heads, heads);
  if (!(dropout >= 0 && dropout < 1)) fail<ValueError>("TransformerConfig", "dropout must be in [0, 1), got {}", dropout);
  if (pad_id < 0 || pad_id >= std::min(src_vocab, tgt_vocab))
    fail<ValueError>("TransformerConfig", "pad_id {} is outside both vocabularies", pad_id);
  if (!(layer_norm_eps >= 0 && layer_norm_eps <= 1))
    fail<ValueError>("TransformerConfig", "layer_norm_eps must be in [0, 1], got {}", layer_norm_eps);
}

int64_t TransformerConfig::parameter_count() const {
  using namespace config_sizes;
  validate();
  const char* what = "TransformerConfig";
  const int64_t kv = d_model / heads * decoder_kv_heads();  // G · D
  const int64_t ln = layer_norm_params(d_model), ff = feed_forward_params(d_model, d_ff);
  const int64_t enc_layer = sum_params({attention_params(d_model, d_model), ff, ln, ln}, what);
  const int64_t dec_layer = sum_params({attention_params(d_model, kv), attention_params(d_model, kv), ff, ln, ln, ln}, what);
  const int64_t final_norms = pre_ln ? 2 * ln : 0;  // one per stack
  return sum_params({checked_mul(src_vocab, d_model, what, "src_vocab x d_model"),
                     checked_mul(tgt_vocab, d_model, what, "tgt_vocab x d_model"),
                     checked_mul(enc_layers, enc_layer, what, "enc_layers x layer"),
                     checked_mul(dec_layers, dec_layer, what, "dec_layers x layer"), final_norms,
                     tie_embeddings ? tgt_vocab : linear_params(d_model, tgt_vocab, true)},
                    what);
}

int64_t TransformerConfig::state_numel() const {
  return config_sizes::sum_params({parameter_count(), tie_embeddings ? tgt_vocab * d_model : 0}, "TransformerConfig");
}

nlohmann::json TransformerConfig::to_json() const {
  return {{"src_vocab", src_vocab}, {"tgt_vocab", tgt_vocab}, {"d_model", d_model}, {"heads", heads},
          {"kv_heads", decoder_kv_heads()},
          {"d_ff", d_ff}, {"enc_layers", enc_layers}, {"dec_layers", dec_layers}, {"dropout", dropout},
          {"max_len", max_len}, {"pre_ln", pre_ln}, {"tie_embeddings", tie_embeddings},
          {"activation", activation == Activation::gelu ? "gelu" : "relu"}, {"pad_id", pad_id},
          {"layer_norm_eps", layer_norm_eps}, {"causal_decoder", causal_decoder}};
}

TransformerConfig TransformerConfig::from_json(const nlohmann::json& j) {
  using config_sizes::json_int;
  constexpr const char* kName = "TransformerConfig";
  TransformerConfig c;
  if (!j.is_object()) fail<ValueError>(kName, "bad config JSON: expected an object, got {}", j.type_name());
  try {
    c.src_vocab = json_int(j, "src_vocab", kName);
    c.tgt_vocab = json_int(j, "tgt_vocab", kName);
    c.d_model = json_int(j, "d_model", kName);
    c.heads = json_int(j, "heads", kName);
    if (j.contains("kv_heads")) c.kv_heads = json_int(j, "kv_heads", kName);  // older checkpoints: heads
    c.d_ff = json_int(j, "d_ff", kName);
    c.enc_layers = json_int(j, "enc_layers", kName);
    c.dec_layers = json_int(j, "dec_layers", kName);
    c.dropout = j.at("dropout").get<double>();
    c.max_len = json_int(j, "max_len", kName);
    c.pre_ln = j.at("pre_ln").get<bool>();
    c.tie_embeddings = j.at("tie_embeddings").get<bool>();
    const std::string act = j.at("activation").get<std::string>();
    if (act != "relu" && act != "gelu") fail<ValueError>(kName, "unknown activation '{}'", act);
    c.activation = act == "gelu" ? Activation::gelu : Activation::relu;
    c.pad_id = json_int(j, "pad_id", kName);
    c.layer_norm_eps = j.value("layer_norm_eps", 1e-5);
    c.causal_decoder = j.value("causal_decoder", true);
  } catch (const nlohmann::json::exception& e) {
    fail<ValueError>(kName, "bad config JSON: {}", e.what());
  }
  c.validate();
  return c;
}

// ---- grouped-query conversion ----------------------------------------------------------

GroupedQueryModel to_grouped_query(const TransformerConfig& c, const TensorMap& state,
                                   int64_t kv_heads) {
  const int64_t from = c.decoder_kv_heads();
  if (kv_heads <= 0 || from % kv_heads != 0)
    fail<ValueError>("to_grouped_query", "kv_heads {} must be positive and divide the model's K/V heads {} "
                     "(heads {}); hint: any divisor of {} works for a multi-head model", kv_heads, from, c.heads, c.heads);
  GroupedQueryModel g{c, state};
  g.config.kv_heads = kv_heads;
  g.config.validate();
  for (int64_t i = 0; i < c.dec_layers; ++i)
    for (const char* attn : {"self_attn", "cross_attn"})
      for (const char* proj : {"k_proj", "v_proj"})
        for (const char* part : {"weight", "bias"}) {
          const std::string name = fmt::format("decoder.layers.{}.{}.{}.{}", i, attn, proj, part);
          auto it = g.state.find(name);
          if (it == g.state.end())
            fail<ValueError>("to_grouped_query", "the state lacks {}; hint: pass a Seq2SeqTransformer's state_dict "
                             "with its config", name);
          it->second = mean_pool_kv_heads(it->second, from, kv_heads);
        }
  return g;
}

// ---- feed-forward ----------------------------------------------------------------------

FeedForward::FeedForward(int64_t d_model, int64_t d_ff, double p, Activation act, Generator& gen,
                         std::shared_ptr<Generator> dropout_gen, DType dtype)
    : UnaryModule("FeedForward"), activation(act) {
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, d_ff, gen, true, dtype));
  drop = register_module("dropout", std::make_shared<Dropout>(p, dropout_gen));
  linear2 = register_module("linear2", std::make_shared<Linear>(d_ff, d_model, gen, true, dtype));
}

Tensor FeedForward::forward(const Tensor& x) {
  // FFN(x) = Linear2(Drop(act(Linear1(x))))      x [B, L, E] -> h [B, L, F] -> [B, L, E]
  Tensor h = linear1->forward(x);
  h = activation == Activation::gelu ? gelu(h) : relu(h);
  return linear2->forward(drop->forward(h));
}

template <class T>
void FeedForward::step_rows(StepState& s, const StepLayer& w, const T* in, T* x, RowBlock rows) const {
  const int64_t E = linear2->out_features;
  const Tensor hidden = s.hidden.narrow(0, rows.first, rows.n);  // [n, F] contiguous
  Linear::forward_rows(hidden.data<T>(), in, rows.n, w.ff1);
  const Tensor h = activation == Activation::gelu ? gelu(hidden) : relu(hidden);
  T* proj = s.proj.data<T>() + rows.first * E;
  Linear::forward_rows(proj, h.data<T>(), rows.n, w.ff2);
  for (int64_t i = 0; i < rows.n * E; ++i) x[i] = x[i] + proj[i];  // the residual add, add's x + y
}

template void FeedForward::step_rows<float>(StepState&, const StepLayer&, const float*, float*, RowBlock) const;
template void FeedForward::step_rows<double>(StepState&, const StepLayer&, const double*, double*, RowBlock) const;

namespace {

// Every attention module of a layer: E wide, H heads, G K/V heads, the model's dropout.
MHAConfig attention_config(const TransformerConfig& c, int64_t kv_heads, std::shared_ptr<Generator> dropout_gen) {
  return {.embed_dim = c.d_model, .num_heads = c.heads, .num_kv_heads = kv_heads, .dropout = c.dropout,
          .dropout_gen = std::move(dropout_gen)};
}

}  // namespace

// ---- encoder -------------------------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerConfig& c, Generator& gen,
                                                 std::shared_ptr<Generator> dg)
    : Module("TransformerEncoderLayer"), pre_ln(c.pre_ln) {
  self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(attention_config(c, c.heads, dg), gen));
  ff = register_module("ff", std::make_shared<FeedForward>(c.d_model, c.d_ff, c.dropout, c.activation, gen, dg));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(Shape{c.d_model}, c.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(Shape{c.d_model}, c.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(c.dropout, dg));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(c.dropout, dg));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& kpm) {
  MHAOptions o;
  o.key_padding_mask = kpm;
  auto sa = [&](const Tensor& h) { return dropout1->forward(self_attn->forward(h, h, h, o).out); };
  if (pre_ln) {
    Tensor h = x + sa(norm1->forward(x));
    return h + dropout2->forward(ff->forward(norm2->forward(h)));
  }
  Tensor h = norm1->forward(x + sa(x));
  return norm2->forward(h + dropout2->forward(ff->forward(h)));
}

TransformerEncoder::TransformerEncoder(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dg)
    : Module("TransformerEncoder") {
  layers = register_module("layers", std::make_shared<ModuleList<TransformerEncoderLayer>>());
  for (int64_t i = 0; i < c.enc_layers; ++i) layers->push_back(std::make_shared<TransformerEncoderLayer>(c, gen, dg));
  if (c.pre_ln) norm = register_module("norm", std::make_shared<LayerNorm>(Shape{c.d_model}, c.layer_norm_eps));
}

Tensor TransformerEncoder::forward(const Tensor& x, const Tensor& kpm) {
  Tensor h = x;
  for (const auto& layer : *layers) h = layer->forward(h, kpm);
  return norm ? norm->forward(h) : h;
}

// ---- decoder ---------------------------------------------------------------------------------

KVCache::KVCache(size_t layers) : self_attn(layers), cross_attn(layers) {
  for (auto& c : cross_attn) c.cross = true;
}
void KVCache::reset() {
  for (auto& c : self_attn) c.reset();
  for (auto& c : cross_attn) c.reset();
  step.reset();
}
void KVCache::reorder(const std::vector<int64_t>& origin) {
  NoGradGuard no_grad;
  const Tensor idx = Tensor::from_vector(origin, {static_cast<int64_t>(origin.size())});
  for (auto& c : self_attn) {
    if (!c.k.defined()) continue;
    c.k = index_select(c.k, 0, idx);
    c.v = index_select(c.v, 0, idx);
  }
  // Cross-attention caches hold the same memory for every row; keep the first n rows.
  for (auto& c : cross_attn) {
    if (!c.k.defined()) continue;
    const int64_t n = static_cast<int64_t>(origin.size());
    if (c.k.size(0) != n) {
      c.k = index_select(c.k, 0, Tensor::zeros({n}, DType::i64));
      c.v = index_select(c.v, 0, Tensor::zeros({n}, DType::i64));
    }
  }
}

size_t KVCache::bytes_used() const {
  size_t n = 0;
  for (auto& c : self_attn) n += c.bytes_used();
  for (auto& c : cross_attn) n += c.bytes_used();
  return n;
}
size_t KVCache::bytes_allocated() const {
  size_t n = 0;
  for (auto& c : self_attn) n += c.bytes_allocated();
  for (auto& c : cross_attn) n += c.bytes_allocated();
  return n;
}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerConfig& c, Generator& gen,
                                                 std::shared_ptr<Generator> dg)
    : Module("TransformerDecoderLayer"), pre_ln(c.pre_ln), causal(c.causal_decoder) {
  const int64_t g = c.decoder_kv_heads();
  self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(attention_config(c, g, dg), gen));
  cross_attn = register_module("cross_attn", std::make_shared<MultiHeadAttention>(attention_config(c, g, dg), gen));
  ff = register_module("ff", std::make_shared<FeedForward>(c.d_model, c.d_ff, c.dropout, c.activation, gen, dg));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(Shape{c.d_model}, c.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(Shape{c.d_model}, c.layer_norm_eps));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(Shape{c.d_model}, c.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(c.dropout, dg));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(c.dropout, dg));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(c.dropout, dg));
}

Tensor TransformerDecoderLayer::forward(const Tensor& x, const DecoderInputs& in, KVCache::Layer cache) {
  MHAOptions so;  // causal self-attention over the target so far
  so.is_causal = causal;
  so.key_padding_mask = cache.self_attn ? Tensor() : in.tgt_key_padding_mask;
  so.cache = cache.self_attn;
  MHAOptions co;  // cross-attention to the encoder memory
  co.key_padding_mask = in.memory_key_padding_mask;
  co.cache = cache.cross_attn;
  const Tensor& memory = in.memory;
  auto sa = [&](const Tensor& h) { return dropout1->forward(self_attn->forward(h, h, h, so).out); };
  auto ca = [&](const Tensor& h) { return dropout2->forward(cross_attn->forward(h, memory, memory, co).out); };
  auto f = [&](const Tensor& h) { return dropout3->forward(ff->forward(h)); };
  if (pre_ln) {
    Tensor h = x + sa(norm1->forward(x));
    h = h + ca(norm2->forward(h));
    return h + f(norm3->forward(h));
  }
  Tensor h = norm1->forward(x + sa(x));
  h = norm2->forward(h + ca(h));
  return norm3->forward(h + f(h));
}

template <class T>
Tensor TransformerDecoderLayer::step_rows(StepState& s, const StepLayer& w, Tensor x, int64_t t,
                                          const PaddingRows& pad, KVCache::Layer cache, RowBlock rows) const {
  if (pre_ln) {
    // h = x + SA(LN1(x));  h = h + CA(LN2(h));  h + FF(LN3(h))
    self_attn->self_step_rows<T>(s, w, norm1->forward(x).data<T>(), x.data<T>(), *cache.self_attn, t, rows);
    cross_attn->cross_step_rows<T>(s, w, norm2->forward(x).data<T>(), x.data<T>(), *cache.cross_attn, pad, rows);
    ff->step_rows<T>(s, w, norm3->forward(x).data<T>(), x.data<T>(), rows);
    return x;
  }
  // h = LN1(x + SA(x));  h = LN2(h + CA(h));  LN3(h + FF(h)). Each sublayer reads its input in
  // its first GEMM and adds into x only at its end, so input and stream may be one buffer.
  self_attn->self_step_rows<T>(s, w, x.data<T>(), x.data<T>(), *cache.self_attn, t, rows);
  x = norm1->forward(x);
  cross_attn->cross_step_rows<T>(s, w, x.data<T>(), x.data<T>(), *cache.cross_attn, pad, rows);
  x = norm2->forward(x);
  ff->step_rows<T>(s, w, x.data<T>(), x.data<T>(), rows);
  return norm3->forward(x);
}

template Tensor TransformerDecoderLayer::step_rows<float>(StepState&, const StepLayer&, Tensor, int64_t,
                                                          const PaddingRows&, KVCache::Layer, RowBlock) const;
template Tensor TransformerDecoderLayer::step_rows<double>(StepState&, const StepLayer&, Tensor, int64_t,
                                                           const PaddingRows&, KVCache::Layer, RowBlock) const;

TransformerDecoder::TransformerDecoder(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dg)
    : Module("TransformerDecoder") {
  layers = register_module("layers", std::make_shared<ModuleList<TransformerDecoderLayer>>());
  for (int64_t i = 0; i < c.dec_layers; ++i) layers->push_back(std::make_shared<TransformerDecoderLayer>(c, gen, dg));
  if (c.pre_ln) norm = register_module("norm", std::make_shared<LayerNorm>(Shape{c.d_model}, c.layer_norm_eps));
}

Tensor TransformerDecoder::forward(const Tensor& x, const DecoderInputs& in, KVCache* cache) {
  if (cache && cache->self_attn.size() != layers->size())
    fail<ValueError>("TransformerDecoder", "cache has {} layers, the decoder {}; hint: use model.make_cache()",
                     cache->self_attn.size(), layers->size());
  Tensor h = x;
  for (size_t i = 0; i < layers->size(); ++i)
    h = (*layers)[i].forward(h, in, cache ? cache->layer(i) : KVCache::Layer{});
  return norm ? norm->forward(h) : h;
}

// ---- the whole model ------------------------------------------------------------------------------

Seq2SeqTransformer::Seq2SeqTransformer(const TransformerConfig& c, Generator& gen, std::shared_ptr<Generator> dg)
    : Module("Seq2SeqTransformer"), config(c) {
  config.validate();
  if (c.dropout > 0 && !dg) dg = std::make_shared<Generator>(gen.next_u64());
  src_embed = register_module("src_embed", std::make_shared<Embedding>(c.src_vocab, c.d_model, gen, c.pad_id));
  tgt_embed = register_module("tgt_embed", std::make_shared<Embedding>(c.tgt_vocab, c.d_model, gen, c.pad_id));
  {
    // N(0, 1) rows scaled down to N(0, 1/E): times sqrt(E) in encode/decode they have unit variance (the header says why).
    NoGradGuard no_grad;
    const double shrink = 1.0 / std::sqrt(static_cast<double>(c.d_model));
    for (Embedding* e : {src_embed.get(), tgt_embed.get()}) e->weight.copy_(e->weight * shrink);
  }
  pos = register_module("pos", std::make_shared<PositionalEncoding>(c.max_len, c.d_model,
                                                                    PositionalEncoding::Kind::sinusoidal, gen));
  embed_dropout = register_module("embed_dropout", std::make_shared<Dropout>(c.dropout, dg));
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(c, gen, dg));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(c, gen, dg));
  generator = register_module("generator", std::make_shared<Linear>(c.d_model, c.tgt_vocab, gen));
  if (c.tie_embeddings)  // one matrix [V, E] is both the target embedding and the output projection
    generator->weight = generator->replace_parameter("weight", tgt_embed->weight);
}

Tensor Seq2SeqTransformer::encode(const Tensor& src, const Tensor& kpm) {
  // x = Drop(Embed(src) · √E + PE)      src [B, S] -> x [B, S, E]
  const double scale = std::sqrt(static_cast<double>(config.d_model));
  Tensor x = embed_dropout->forward(pos->forward(src_embed->forward(src) * scale));
  return encoder->forward(x, kpm);
}

Tensor Seq2SeqTransformer::decode(const Tensor& tgt, const Tensor& memory, const Tensor& mem_kpm,
                                  const Tensor& tgt_kpm, KVCache* cache) {
  const double scale = std::sqrt(static_cast<double>(config.d_model));
  const int64_t start = cache ? cache->length() : 0;
  Tensor x = embed_dropout->forward(pos->forward(tgt_embed->forward(tgt) * scale, start));
  Tensor h = decoder->forward(x, {.memory = memory, .tgt_key_padding_mask = tgt_kpm, .memory_key_padding_mask = mem_kpm},
                              cache);
  return generator->forward(h);  // [B, T, V_tgt]
}

namespace {

// The decoder's weights packed for decode_step.
std::shared_ptr<StepState> pack_decoder(const Seq2SeqTransformer& model) {
  auto s = std::make_shared<StepState>();
  for (const auto& dl : *model.decoder->layers) {
    const MultiHeadAttention& sa = *dl->self_attn;
    s->layers.push_back({.qkv = pack_linears({sa.q_proj.get(), sa.k_proj.get(), sa.v_proj.get()}),
                         .out = pack_linears({sa.out_proj.get()}),
                         .cross_q = pack_linears({dl->cross_attn->q_proj.get()}),
                         .cross_out = pack_linears({dl->cross_attn->out_proj.get()}),
                         .ff1 = pack_linears({dl->ff->linear1.get()}),
                         .ff2 = pack_linears({dl->ff->linear2.get()})});
  }
  s->head = pack_linears({model.generator.get()});
  return s;
}

}  // namespace

Tensor Seq2SeqTransformer::decode_step(std::span<const int64_t> ids, KVCache& cache, const Tensor& memory,
                                       const Tensor& mem_kpm) {
  const auto& layers = *decoder->layers;
  check_decode_step(*this, "Seq2SeqTransformer::decode_step", cache, layers.size(), config.max_len);
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i].self_attn->observer || layers[i].cross_attn->observer)
      fail<ValueError>("Seq2SeqTransformer::decode_step", "decoder.layers.{}.{} has an attention observer, which a "
                       "decode step does not call; hint: decode() runs the graph and calls it", i,
                       layers[i].self_attn->observer ? "self_attn" : "cross_attn");
  if (!memory.defined() || memory.dim() != 3 || memory.size(0) != static_cast<int64_t>(ids.size()))
    fail<ShapeError>("Seq2SeqTransformer::decode_step", "memory must be [{}, S, {}] (one row per id), got {}",
                     ids.size(), config.d_model, memory.defined() ? shape_str(memory.shape()) : "undefined");
  if (!cache.step) cache.step = pack_decoder(*this);
  StepState& s = *cache.step;
  refresh_step_weights(s);
  const int64_t B = static_cast<int64_t>(ids.size());
  size_step_buffers(s, B, config.d_model, config.d_ff, config.tgt_vocab, generator->weight.dtype());
  NoGradGuard no_grad;
  embed_step(s.stream, ids, tgt_embed->weight, std::sqrt(static_cast<double>(config.d_model)), pos->table,
             cache.length(), "Seq2SeqTransformer::decode_step");
  int64_t t = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    t = layers[i].self_attn->prepare_self_step(s, cache.self_attn[i]);
    layers[i].cross_attn->prepare_cross_step(s, memory, mem_kpm, cache.cross_attn[i]);
  }
  const PaddingRows pad = padding_rows(mem_kpm);
  dispatch_float(s.dtype, "Seq2SeqTransformer::decode_step", [&]<class T>() {
    for_row_blocks(B, kRowsPerTask, [&](RowBlock rows) {
      Tensor x = s.stream.narrow(0, rows.first, rows.n);
      for (size_t i = 0; i < layers.size(); ++i)
        x = layers[i].step_rows<T>(s, s.layers[i], x, t, pad, cache.layer(i), rows);
      if (decoder->norm) x = decoder->norm->forward(x);
      Linear::forward_rows(s.logits.data<T>() + rows.first * config.tgt_vocab, x.data<T>(), rows.n, s.head);
    });
  });
  for (auto& sc : cache.self_attn) sc.length += 1;
  return s.logits.clone();
}

Tensor Seq2SeqTransformer::forward(const Tensor& src, const Tensor& tgt_in, const Tensor& src_kpm,
                                   const Tensor& tgt_kpm) {
  return decode(tgt_in, encode(src, src_kpm), src_kpm, tgt_kpm);
}

std::string Seq2SeqTransformer::extra_repr() const { return config.to_json().dump(); }

}  // namespace attograd
