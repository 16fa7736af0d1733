#include <attograd/nn/gpt.h>

#include <cmath>

#include <attograd/autograd/engine.h>
#include <attograd/nn/config_sizes.h>
#include <attograd/nn/inference.h>
#include <attograd/nn/init.h>

namespace attograd {

namespace {

// A KV cache holds each position's keys and values as they were computed;
// without the causal mask they depend on every later token, so none can be kept.
void check_causal_for_cache(const GPTConfig& c, const char* op) {
  if (!c.causal)
    fail<ValueError>(op, "the model has no causal mask (config.causal = false), so its keys and values change with "
                     "every later token and a KV cache cannot hold them; hint: run forward() on the whole sequence "
                     "without a cache");
}

}  // namespace

// ---- config -------------------------------------------------------------------------

void GPTConfig::validate() const {
  using namespace config_sizes;
  check_range("GPTConfig", "vocab", vocab, 1, kMaxVocab);
  check_range("GPTConfig", "context", context, 1, kMaxLength);
  check_range("GPTConfig", "d_model", d_model, 1, kMaxWidth);
  check_range("GPTConfig", "heads", heads, 1, d_model);
  check_range("GPTConfig", "d_ff", d_ff, 1, kMaxFFWidth);
  check_range("GPTConfig", "layers", layers, 1, kMaxLayers);
  if (d_model % heads != 0)
    fail<ValueError>("GPTConfig", "heads ({}) must divide d_model ({}); hint: try heads = {}", heads, d_model,
                     d_model % 4 == 0 ? 4 : 1);
  if (kv_heads && (*kv_heads <= 0 || heads % *kv_heads != 0))
    fail<ValueError>("GPTConfig", "kv_heads ({}) must be positive and divide heads ({}); hint: kv_heads = {} is "
                     "multi-head, 1 multi-query attention", *kv_heads, heads, heads);
  if (!(dropout >= 0 && dropout < 1)) fail<ValueError>("GPTConfig", "dropout must be in [0, 1), got {}", dropout);
  if (!(layer_norm_eps >= 0 && layer_norm_eps <= 1))
    fail<ValueError>("GPTConfig", "layer_norm_eps must be in [0, 1], got {}", layer_norm_eps);
}

int64_t GPTConfig::parameter_count() const {
  using namespace config_sizes;
  validate();
  const int64_t kv = d_model / heads * kv_head_count();  // G · D
  const int64_t block = sum_params({layer_norm_params(d_model), attention_params(d_model, kv),
                                    layer_norm_params(d_model), feed_forward_params(d_model, d_ff)},
                                   "GPTConfig");
  const int64_t embed = checked_mul(vocab, d_model, "GPTConfig", "vocab x d_model");
  const int64_t positions_table =
      positions == PositionalEncoding::Kind::learned ? checked_mul(context, d_model, "GPTConfig", "context x d_model") : 0;
  return sum_params({embed, positions_table, checked_mul(layers, block, "GPTConfig", "layers x block"),
                     layer_norm_params(d_model), tie_embeddings ? 0 : linear_params(d_model, vocab, false)},
                    "GPTConfig");
}

int64_t GPTConfig::state_numel() const {
  return config_sizes::sum_params({parameter_count(), tie_embeddings ? vocab * d_model : 0}, "GPTConfig");
}

nlohmann::json GPTConfig::to_json() const {
  return {{"vocab", vocab}, {"context", context}, {"d_model", d_model}, {"heads", heads},
          {"kv_heads", kv_head_count()}, {"d_ff", d_ff}, {"layers", layers}, {"dropout", dropout},
          {"positions", positions == PositionalEncoding::Kind::learned ? "learned" : "sinusoidal"},
          {"tie_embeddings", tie_embeddings}, {"init", init == GPTInit::gpt2 ? "gpt2" : "pytorch"},
          {"layer_norm_eps", layer_norm_eps}, {"causal", causal}};
}

GPTConfig GPTConfig::from_json(const nlohmann::json& j) {
  using config_sizes::json_int;
  GPTConfig c;
  if (!j.is_object()) fail<ValueError>("GPTConfig", "bad config JSON: expected an object, got {}", j.type_name());
  try {
    c.vocab = json_int(j, "vocab", "GPTConfig");
    c.context = json_int(j, "context", "GPTConfig");
    c.d_model = json_int(j, "d_model", "GPTConfig");
    c.heads = json_int(j, "heads", "GPTConfig");
    if (j.contains("kv_heads")) c.kv_heads = json_int(j, "kv_heads", "GPTConfig");  // older checkpoints: heads
    c.d_ff = json_int(j, "d_ff", "GPTConfig");
    c.layers = json_int(j, "layers", "GPTConfig");
    c.dropout = j.at("dropout").get<double>();
    const std::string pos = j.at("positions").get<std::string>();
    if (pos != "learned" && pos != "sinusoidal")
      fail<ValueError>("GPTConfig", "unknown positions '{}'; hint: learned or sinusoidal", pos);
    c.positions = pos == "learned" ? PositionalEncoding::Kind::learned : PositionalEncoding::Kind::sinusoidal;
    c.tie_embeddings = j.at("tie_embeddings").get<bool>();
    const std::string init = j.at("init").get<std::string>();
    if (init != "pytorch" && init != "gpt2") fail<ValueError>("GPTConfig", "unknown init '{}'; hint: pytorch or gpt2", init);
    c.init = init == "gpt2" ? GPTInit::gpt2 : GPTInit::pytorch;
    c.layer_norm_eps = j.value("layer_norm_eps", 1e-5);
    c.causal = j.value("causal", true);  // older checkpoints: causal
  } catch (const nlohmann::json::exception& e) {
    fail<ValueError>("GPTConfig", "bad config JSON: {}", e.what());
  }
  c.validate();
  return c;
}

// ---- block ------------------------------------------------------------------------------

GPTBlock::GPTBlock(const GPTConfig& c, Generator& gen, std::shared_ptr<Generator> dg)
    : Module("GPTBlock"), causal(c.causal) {
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(Shape{c.d_model}, c.layer_norm_eps));
  attn = register_module("attn", std::make_shared<MultiHeadAttention>(
                                     MHAConfig{.embed_dim = c.d_model, .num_heads = c.heads,
                                               .num_kv_heads = c.kv_head_count(), .dropout = c.dropout,
                                               .dropout_gen = dg},
                                     gen));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(Shape{c.d_model}, c.layer_norm_eps));
  mlp = register_module("mlp", std::make_shared<FeedForward>(c.d_model, c.d_ff, c.dropout, Activation::gelu, gen, dg));
  drop1 = register_module("drop1", std::make_shared<Dropout>(c.dropout, dg));
  drop2 = register_module("drop2", std::make_shared<Dropout>(c.dropout, dg));
}

Tensor GPTBlock::forward(const Tensor& x, AttentionCache* cache) {
  // x = x + Drop(CausalSelfAttn(LN1(x)));  x = x + Drop(MLP(LN2(x)))
  MHAOptions o;
  o.is_causal = causal;
  o.cache = cache;
  const Tensor h1 = ln1->forward(x);
  const Tensor h = x + drop1->forward(attn->forward(h1, h1, h1, o).out);
  return h + drop2->forward(mlp->forward(ln2->forward(h)));
}

template <class T>
void GPTBlock::step_rows(StepState& s, const StepLayer& w, const Tensor& x, AttentionCache& cache, int64_t t,
                         RowBlock rows) const {
  // x = x + SA(LN1(x));  x = x + MLP(LN2(x))
  attn->self_step_rows<T>(s, w, ln1->forward(x).data<T>(), x.data<T>(), cache, t, rows);
  mlp->step_rows<T>(s, w, ln2->forward(x).data<T>(), x.data<T>(), rows);
}

template void GPTBlock::step_rows<float>(StepState&, const StepLayer&, const Tensor&, AttentionCache&, int64_t,
                                         RowBlock) const;
template void GPTBlock::step_rows<double>(StepState&, const StepLayer&, const Tensor&, AttentionCache&, int64_t,
                                          RowBlock) const;

// ---- model ------------------------------------------------------------------------------

GPT::GPT(const GPTConfig& c, Generator& gen, std::shared_ptr<Generator> dg) : Module("GPT"), config(c) {
  config.validate();
  if (c.dropout > 0 && !dg) dg = std::make_shared<Generator>(gen.next_u64());
  tok_embed = register_module("tok_embed", std::make_shared<Embedding>(c.vocab, c.d_model, gen));
  pos = register_module("pos", std::make_shared<PositionalEncoding>(c.context, c.d_model, c.positions, gen));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout, dg));
  blocks = register_module("blocks", std::make_shared<ModuleList<GPTBlock>>());
  for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(std::make_shared<GPTBlock>(c, gen, dg));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(Shape{c.d_model}, c.layer_norm_eps));
  lm_head = register_module("lm_head", std::make_shared<Linear>(c.d_model, c.vocab, gen, /*bias=*/false));
  if (c.init == GPTInit::gpt2) init_gpt2(gen);
  if (c.tie_embeddings) lm_head->weight = lm_head->replace_parameter("weight", tok_embed->weight);
}

void GPT::init_gpt2(Generator& gen) {
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.layers));
  init::normal_(tok_embed->weight, 0.0, 0.02, gen);
  if (config.positions == PositionalEncoding::Kind::learned) init::normal_(pos->table, 0.0, 0.02, gen);
  auto linear = [&](Linear& l, double std) {
    init::normal_(l.weight, 0.0, std, gen);
    if (l.bias.defined()) init::zeros_(l.bias);
  };
  for (const auto& b : *blocks) {
    linear(*b->attn->q_proj, 0.02);
    linear(*b->attn->k_proj, 0.02);
    linear(*b->attn->v_proj, 0.02);
    linear(*b->attn->out_proj, residual_std);
    linear(*b->mlp->linear1, 0.02);
    linear(*b->mlp->linear2, residual_std);
  }
  linear(*lm_head, 0.02);
}

Tensor GPT::forward(const Tensor& ids, KVCache* cache) {
  if (ids.dim() != 2) fail<ShapeError>("GPT", "expected ids [B, T], got {}", shape_str(ids.shape()));
  if (ids.dtype() != DType::i64) fail<DTypeError>("GPT", "expected i64 ids, got {}", dtype_name(ids.dtype()));
  if (cache) check_causal_for_cache(config, "GPT");
  if (cache && cache->self_attn.size() != blocks->size())
    fail<ValueError>("GPT", "cache has {} layers, the model {}; hint: use model.make_cache()", cache->self_attn.size(),
                     blocks->size());
  const int64_t start = cache ? cache->length() : 0;
  if (start + ids.size(1) > config.context)
    fail<ShapeError>("GPT", "positions [{}, {}) exceed the context of {} tokens; hint: feed at most {} tokens", start,
                     start + ids.size(1), config.context, config.context);
  // x = Drop(TokEmbed(ids) + Pos(start..start+T-1))      ids [B, T] -> x [B, T, E]
  Tensor x = drop->forward(pos->forward(tok_embed->forward(ids), start));
  for (size_t i = 0; i < blocks->size(); ++i) x = (*blocks)[i].forward(x, cache ? &cache->self_attn[i] : nullptr);
  return lm_head->forward(ln_f->forward(x));  // [B, T, V]
}

Tensor GPT::decode_step(std::span<const int64_t> ids, KVCache& cache) {
  const auto& blks = *blocks;
  check_causal_for_cache(config, "GPT::decode_step");
  check_decode_step(*this, "GPT::decode_step", cache, blks.size(), config.context);
  for (size_t i = 0; i < blks.size(); ++i)
    if (blks[i].attn->observer)
      fail<ValueError>("GPT::decode_step", "blocks.{}.attn has an attention observer, which decode_step does not "
                       "call; hint: forward() runs the graph and calls it", i);
  if (!cache.step) {  // the blocks' weights packed
    auto s = std::make_shared<StepState>();
    for (const auto& b : blks) {
      const MultiHeadAttention& a = *b->attn;
      s->layers.push_back({.qkv = pack_linears({a.q_proj.get(), a.k_proj.get(), a.v_proj.get()}),
                           .out = pack_linears({a.out_proj.get()}),
                           .ff1 = pack_linears({b->mlp->linear1.get()}),
                           .ff2 = pack_linears({b->mlp->linear2.get()})});
    }
    s->head = pack_linears({lm_head.get()});
    cache.step = std::move(s);
  }
  StepState& s = *cache.step;
  refresh_step_weights(s);
  const int64_t B = static_cast<int64_t>(ids.size());
  size_step_buffers(s, B, config.d_model, config.d_ff, config.vocab, lm_head->weight.dtype());
  NoGradGuard no_grad;
  embed_step(s.stream, ids, tok_embed->weight, 1.0, pos->table, cache.length(), "GPT::decode_step");
  int64_t t = 0;
  for (size_t i = 0; i < blks.size(); ++i) t = blks[i].attn->prepare_self_step(s, cache.self_attn[i]);
  dispatch_float(s.dtype, "GPT::decode_step", [&]<class T>() {
    for_row_blocks(B, kRowsPerTask, [&](RowBlock rows) {
      Tensor x = s.stream.narrow(0, rows.first, rows.n);
      for (size_t i = 0; i < blks.size(); ++i) blks[i].step_rows<T>(s, s.layers[i], x, cache.self_attn[i], t, rows);
      x = ln_f->forward(x);
      Linear::forward_rows(s.logits.data<T>() + rows.first * config.vocab, x.data<T>(), rows.n, s.head);
    });
  });
  for (auto& sc : cache.self_attn) sc.length += 1;
  return s.logits.clone();
}

std::string GPT::extra_repr() const { return config.to_json().dump(); }

}  // namespace attograd
