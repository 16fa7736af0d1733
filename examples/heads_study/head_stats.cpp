#include "examples/heads_study/head_stats.h"

#include <algorithm>
#include <cmath>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/generator.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/autograd/ops/shape.h>

namespace attograd::app::heads {

namespace {

// [B, L] b8 padding mask as one bool per position (all false when undefined).
std::vector<bool> padding_flags(const Tensor& mask, int64_t B, int64_t L, const char* what) {
  if (!mask.defined()) return std::vector<bool>(static_cast<size_t>(B * L), false);
  if (mask.dtype() != DType::b8 || mask.shape() != Shape{B, L})
    fail<ShapeError>("HeadStatistics", "{} must be b8 [{}, {}], got {} {}", what, B, L, dtype_name(mask.dtype()),
                     shape_str(mask.shape()));
  const auto v = mask.to_vector<double>();
  std::vector<bool> flags(v.size());
  for (size_t i = 0; i < v.size(); ++i) flags[i] = v[i] != 0;
  return flags;
}

}  // namespace

void HeadStatistics::add(const std::string& module, const Tensor& weights, const Tensor& query_padding,
                         const Tensor& key_padding, bool causal, const Tensor& tokens) {
  if (weights.dim() != 4)
    fail<ShapeError>("HeadStatistics", "{}: weights must be [B, H, T, S], got {}; hint: pass an "
                     "AttentionCall's weights", module, shape_str(weights.shape()));
  const int64_t B = weights.size(0), H = weights.size(1), T = weights.size(2), S = weights.size(3);
  const std::vector<bool> qpad = padding_flags(query_padding, B, T, "query_padding");
  const std::vector<bool> kpad = padding_flags(key_padding, B, S, "key_padding");
  if (tokens.defined() && (T != S || tokens.shape() != Shape{B, T}))
    fail<ShapeError>("HeadStatistics", "{}: tokens must be [{}, {}] with as many keys as queries, got {} for weights "
                     "{}; hint: the induction score is for self-attention", module, B, T, shape_str(tokens.shape()),
                     shape_str(weights.shape()));
  const std::vector<int64_t> tok = tokens.defined() ? tokens.to_vector<int64_t>() : std::vector<int64_t>();
  const std::vector<double> w = weights.to_vector<double>();  // [B, H, T, S], row-major

  auto [it, inserted] = sums_.try_emplace(module, static_cast<size_t>(H));
  if (inserted) order_.push_back(module);
  std::vector<Sums>& heads = it->second;
  if (static_cast<int64_t>(heads.size()) != H)
    fail<ShapeError>("HeadStatistics", "{} had {} heads before, now {}", module, heads.size(), H);

  for (int64_t b = 0; b < B; ++b) {
    // The sequence's unpadded queries and keys, and its last unpadded key: the
    // diagonal's slope and the cross-attention's sink.
    int64_t queries = 0, keys = 0, last_key = -1;
    for (int64_t t = 0; t < T; ++t) queries += !qpad[static_cast<size_t>(b * T + t)];
    for (int64_t s = 0; s < S; ++s)
      if (!kpad[static_cast<size_t>(b * S + s)]) {
        ++keys;
        last_key = s;
      }
    for (int64_t t = 0; t < T; ++t) {
      if (qpad[static_cast<size_t>(b * T + t)]) continue;
      const int64_t centre =
          std::lround(static_cast<double>(t * keys) / static_cast<double>(std::max<int64_t>(queries, 1)));
      int64_t visible = 0;
      std::vector<bool> seen(static_cast<size_t>(S));
      for (int64_t s = 0; s < S; ++s) {
        seen[static_cast<size_t>(s)] = !kpad[static_cast<size_t>(b * S + s)] && (!causal || s <= t);
        visible += seen[static_cast<size_t>(s)];
      }
      // The induction keys: s after an earlier occurrence of token t (s - 1 < t).
      std::vector<int64_t> after;
      if (!tok.empty())
        for (int64_t s = 1; s <= std::min(t, S - 1); ++s)
          if (seen[static_cast<size_t>(s)] && tok[static_cast<size_t>(b * T + s - 1)] == tok[static_cast<size_t>(b * T + t)])
            after.push_back(s);
      for (int64_t h = 0; h < H; ++h) {
        const double* row = w.data() + ((b * H + h) * T + t) * S;
        double entropy = 0, distance = 0, peak = 0, total = 0;
        for (int64_t s = 0; s < S; ++s) {
          const double p = row[s];
          total += p;
          if (p > 0) entropy -= p * std::log(p);
          distance += p * static_cast<double>(std::abs(t - s));
          peak = std::max(peak, p);
        }
        if (total == 0) continue;  // a fully masked row attends to nothing
        Sums& sum = heads[static_cast<size_t>(h)];
        sum.entropy += entropy;
        sum.uniform += std::log(static_cast<double>(std::max<int64_t>(visible, 1)));
        sum.distance += distance;
        sum.max_weight += peak;
        if (t >= 1 && t - 1 < S) sum.previous += row[t - 1];
        if (t < S) sum.self += row[t];
        if (t + 1 < S) sum.next += row[t + 1];
        sum.first += row[0];
        for (int64_t k = -kMaxOffset; k <= kMaxOffset; ++k)
          if (t - k >= 0 && t - k < S) sum.at_offset[static_cast<size_t>(k + kMaxOffset)] += row[t - k];
        for (int64_t s : after) sum.induction += row[s];
        sum.induction_chance += static_cast<double>(after.size()) / static_cast<double>(std::max<int64_t>(visible, 1));
        if (last_key >= 0) sum.last += row[last_key];
        for (int64_t s = std::max<int64_t>(centre - 1, 0); s <= std::min(centre + 1, S - 1); ++s)
          sum.diagonal += row[s];
        ++sum.rows;
      }
    }
  }
}

void HeadStatistics::add_forward(Module& model, const std::function<AttentionRows(const std::string&)>& rows,
                                 const std::function<void()>& forward) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  {
    AttentionObserverGuard observe(model, [&](const std::string& name) -> AttentionObserver {
      return [this, name, r = rows(name)](AttentionCall& call) {
        add(name, call.weights, r.query_padding, r.key_padding, r.causal, r.tokens);
      };
    });
    forward();
  }
  model.train(was_training);
}

void HeadStatistics::add_batch(Seq2SeqTransformer& model, const Tensor& src, const Tensor& tgt_in,
                               const Tensor& src_key_padding_mask, const Tensor& tgt_key_padding_mask,
                               bool induction_tokens) {
  const auto rows = [&](const std::string& name) {
    const bool encoder = name.starts_with("encoder.");
    const bool cross = name.ends_with("cross_attn");
    const bool decoder_self = !encoder && !cross;
    return AttentionRows{encoder ? src_key_padding_mask : tgt_key_padding_mask,
                         encoder || cross ? src_key_padding_mask : tgt_key_padding_mask,
                         decoder_self && induction_tokens ? tgt_in : Tensor(), decoder_self};
  };
  add_forward(model, rows, [&] { model.forward(src, tgt_in, src_key_padding_mask, tgt_key_padding_mask); });
}

std::vector<HeadStat> HeadStatistics::results() const {
  std::vector<HeadStat> out;
  for (const std::string& module : order_) {
    const std::vector<Sums>& heads = sums_.at(module);
    for (size_t h = 0; h < heads.size(); ++h) {
      const Sums& s = heads[h];
      const double n = static_cast<double>(std::max<int64_t>(s.rows, 1));
      HeadStat stat{module, static_cast<int64_t>(h), s.entropy / n, s.uniform / n, s.distance / n,
                    s.max_weight / n, s.rows, s.previous / n, s.self / n, s.next / n, s.first / n,
                    s.induction / n, s.induction_chance / n, s.last / n, s.diagonal / n};
      // Nearest first, behind (k > 0) before ahead: a tie keeps the nearer offset.
      stat.offset = 2;
      stat.offset_mass = s.at_offset[2 + kMaxOffset] / n;
      for (int64_t d = 2; d <= kMaxOffset; ++d)
        for (int64_t k : {d, -d}) {
          const double mass = s.at_offset[static_cast<size_t>(k + kMaxOffset)] / n;
          if (mass > stat.offset_mass) {
            stat.offset = k;
            stat.offset_mass = mass;
          }
        }
      out.push_back(std::move(stat));
    }
  }
  return out;
}

namespace {

DType model_dtype(Module& model) {
  const std::vector<Tensor> p = model.parameters();
  return p.empty() ? DType::f32 : p.front().dtype();
}

// "module:0110|module:11": the heads a mask removes, as a cache key.
std::string mask_key(const HeadMask& mask) {
  std::string key;
  for (const auto& [name, keep] : mask) {
    key += name + ':';
    for (double k : keep) key += k == 0.0 ? '0' : '1';
    key += '|';
  }
  return key;
}

}  // namespace

double heads_loss(Module& model, const LossBatches& data) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  double total = 0, tokens = 0;
  for (size_t i = 0; i < data.batches; ++i) {
    const BatchLoss b = data.loss(i);
    total += b.sum.item();
    tokens += b.tokens;
  }
  model.train(was_training);
  return total / std::max(tokens, 1.0);
}

HeadMask full_head_mask(const Module& model) {
  HeadMask mask;
  for (const auto& [name, m] : attention_modules(model))
    mask[name] = std::vector<double>(static_cast<size_t>(m->num_heads), 1.0);
  return mask;
}

int64_t removed_heads(const HeadMask& mask) {
  int64_t n = 0;
  for (const auto& [name, keep] : mask)
    for (double k : keep) n += k == 0.0;
  return n;
}

HeadMaskGuard::HeadMaskGuard(Module& model, const HeadMask& mask)
    : scales_([&] {
        const DType dt = model_dtype(model);
        std::map<std::string, Tensor> s;
        for (const auto& [name, keep] : mask)
          s[name] = Tensor::from_vector(keep, {static_cast<int64_t>(keep.size())}, dt);
        return s;
      }()),
      guard_(model, [this](const std::string& name) -> AttentionObserver {
        const auto it = scales_.find(name);
        if (it == scales_.end()) return nullptr;
        return [&scale = it->second](AttentionCall& call) { call.head_scale = scale; };
      }) {}

double masked_loss(Module& model, const LossBatches& data, const HeadMask& mask) {
  HeadMaskGuard guard(model, mask);
  return heads_loss(model, data);
}

std::vector<HeadAblation> ablate_heads(Module& model, const LossBatches& data, double* baseline) {
  const double base = heads_loss(model, data);
  if (baseline) *baseline = base;
  const HeadMask full = full_head_mask(model);
  std::vector<HeadAblation> out;
  for (const auto& [name, m] : attention_modules(model))
    for (int64_t h = 0; h < m->num_heads; ++h) {
      HeadMask mask{{name, full.at(name)}};  // only this module scaled: the others run as they are
      mask.at(name)[static_cast<size_t>(h)] = 0.0;
      const double loss = masked_loss(model, data, mask);
      out.push_back({name, h, loss, loss - base});
    }
  return out;
}

std::vector<HeadImportance> head_importance(Module& model, const LossBatches& data, const HeadMask& mask) {
  const bool was_training = model.is_training();
  model.eval();
  const DType dt = model_dtype(model);
  const auto modules = attention_modules(model);
  std::vector<std::vector<double>> sums(modules.size());
  for (size_t m = 0; m < modules.size(); ++m) sums[m].assign(static_cast<size_t>(modules[m].second->num_heads), 0.0);

  for (size_t i = 0; i < data.batches; ++i) {
    // ξ [H] per module: the gates, leaves that require grad, at the mask's values.
    std::vector<Tensor> gates;
    std::map<std::string, size_t> index;
    for (size_t m = 0; m < modules.size(); ++m) {
      const auto& [name, module] = modules[m];
      const auto it = mask.find(name);
      std::vector<double> xi = it != mask.end() ? it->second : std::vector<double>(sums[m].size(), 1.0);
      gates.push_back(Tensor::from_vector(xi, {module->num_heads}, dt).requires_grad_());
      index[name] = m;
    }
    AttentionObserverGuard gate(model, [&](const std::string& name) -> AttentionObserver {
      return [&g = gates[index.at(name)]](AttentionCall& call) { call.head_scale = g; };
    });
    const BatchLoss b = data.loss(i);
    const Tensor loss = b.sum * (1.0 / std::max(b.tokens, 1.0));
    const std::vector<Tensor> dxi = grad({loss}, gates);
    for (size_t m = 0; m < modules.size(); ++m) {
      const std::vector<double> g = dxi[m].to_vector<double>();
      for (size_t h = 0; h < g.size(); ++h) sums[m][h] += std::abs(g[h]);
    }
  }
  model.train(was_training);

  std::vector<HeadImportance> out;
  const double n = static_cast<double>(std::max<size_t>(data.batches, 1));
  for (size_t m = 0; m < modules.size(); ++m) {
    double norm = 0;
    for (double v : sums[m]) norm += (v / n) * (v / n);
    norm = std::sqrt(norm);
    for (size_t h = 0; h < sums[m].size(); ++h) {
      const double imp = sums[m][h] / n;
      out.push_back({modules[m].first, static_cast<int64_t>(h), imp, norm > 0 ? imp / norm : 0.0});
    }
  }
  return out;
}

std::vector<double> pruning_curve(Module& model, const LossBatches& data, const std::vector<HeadRef>& order,
                                  const std::vector<int64_t>& ks, std::map<std::string, double>* cache) {
  std::map<std::string, double> own;
  std::map<std::string, double>& seen = cache ? *cache : own;
  const HeadMask full = full_head_mask(model);
  std::vector<double> out;
  for (int64_t k : ks) {
    if (k < 0 || k > static_cast<int64_t>(order.size()))
      fail<ValueError>("pruning_curve", "k = {} heads to remove, but the order has {}; hint: k in [0, {}]", k,
                       order.size(), order.size());
    HeadMask mask = full;
    for (int64_t i = 0; i < k; ++i) {
      const auto& [name, head] = order[static_cast<size_t>(i)];
      const auto it = mask.find(name);
      if (it == mask.end() || head < 0 || head >= static_cast<int64_t>(it->second.size()))
        fail<ValueError>("pruning_curve", "the order names {} head {}, which the model does not have; hint: names "
                         "as attention_modules gives them", name, head);
      it->second[static_cast<size_t>(head)] = 0.0;
    }
    const std::string key = mask_key(mask);
    const auto hit = seen.find(key);
    out.push_back(hit != seen.end() ? hit->second : (seen[key] = masked_loss(model, data, mask)));
  }
  return out;
}

std::vector<HeadRef> ascending_order(const std::vector<HeadRef>& heads, const std::vector<double>& score) {
  if (score.size() != heads.size())
    fail<ValueError>("ascending_order", "{} scores for {} heads; hint: one score per head", score.size(), heads.size());
  std::vector<size_t> idx(heads.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });
  std::vector<HeadRef> out;
  for (size_t i : idx) out.push_back(heads[i]);
  return out;
}

std::vector<HeadRef> random_order(std::vector<HeadRef> heads, uint64_t seed) {
  Generator gen(seed);
  for (size_t i = heads.size(); i > 1; --i) std::swap(heads[i - 1], heads[gen.randint(i)]);
  return heads;
}

LossBatches seq2seq_loss(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches, int64_t pad_id) {
  return {batches.size(), [&model, &batches, pad_id](size_t i) {
            const AblationBatch& b = batches[i];
            CrossEntropyOptions ce;
            ce.ignore_index = pad_id;
            ce.reduction = Reduction::sum;
            const Tensor logits =
                model.forward(b.src, b.tgt_in, b.src_key_padding_mask, b.tgt_key_padding_mask);  // [B, T, V]
            const Tensor target = b.tgt_out.reshape({-1});
            double tokens = 0;
            for (double id : target.to_vector<double>()) tokens += static_cast<double>(id != static_cast<double>(pad_id));
            return BatchLoss{cross_entropy(logits.reshape({-1, logits.size(2)}), target, ce), tokens};
          }};
}

double masked_heads_loss(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches, int64_t pad_id) {
  return heads_loss(model, seq2seq_loss(model, batches, pad_id));
}

std::vector<HeadAblation> ablate_heads(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches,
                                       int64_t pad_id, double* baseline) {
  return ablate_heads(model, seq2seq_loss(model, batches, pad_id), baseline);
}

std::vector<HeadImportance> head_importance(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches,
                                            int64_t pad_id, const HeadMask& mask) {
  return head_importance(model, seq2seq_loss(model, batches, pad_id), mask);
}

}  // namespace attograd::app::heads
