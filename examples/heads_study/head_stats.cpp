#include "examples/heads_study/head_stats.h"

#include <cmath>

#include <attograd/autograd/engine.h>
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
                         const Tensor& key_padding, bool causal) {
  if (weights.dim() != 4)
    fail<ShapeError>("HeadStatistics", "{}: weights must be [B, H, T, S], got {}; hint: pass an "
                     "AttentionCall's weights", module, shape_str(weights.shape()));
  const int64_t B = weights.size(0), H = weights.size(1), T = weights.size(2), S = weights.size(3);
  const std::vector<bool> qpad = padding_flags(query_padding, B, T, "query_padding");
  const std::vector<bool> kpad = padding_flags(key_padding, B, S, "key_padding");
  const std::vector<double> w = weights.to_vector<double>();  // [B, H, T, S], row-major

  auto [it, inserted] = sums_.try_emplace(module, static_cast<size_t>(H));
  if (inserted) order_.push_back(module);
  std::vector<Sums>& heads = it->second;
  if (static_cast<int64_t>(heads.size()) != H)
    fail<ShapeError>("HeadStatistics", "{} had {} heads before, now {}", module, heads.size(), H);

  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      if (qpad[static_cast<size_t>(b * T + t)]) continue;
      int64_t visible = 0;
      for (int64_t s = 0; s < S; ++s) visible += !kpad[static_cast<size_t>(b * S + s)] && (!causal || s <= t);
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
        ++sum.rows;
      }
    }
}

void HeadStatistics::add_batch(Seq2SeqTransformer& model, const Tensor& src, const Tensor& tgt_in,
                               const Tensor& src_key_padding_mask, const Tensor& tgt_key_padding_mask) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  {
    AttentionObserverGuard observe(model, [&](const std::string& name) -> AttentionObserver {
      const bool encoder = name.starts_with("encoder.");
      const bool cross = name.ends_with("cross_attn");
      const Tensor& query_padding = encoder ? src_key_padding_mask : tgt_key_padding_mask;
      const Tensor& key_padding = encoder || cross ? src_key_padding_mask : tgt_key_padding_mask;
      return [this, name, &query_padding, &key_padding, causal = !encoder && !cross](AttentionCall& call) {
        add(name, call.weights, query_padding, key_padding, causal);
      };
    });
    model.forward(src, tgt_in, src_key_padding_mask, tgt_key_padding_mask);
  }
  if (was_training) model.train();
}

std::vector<HeadStat> HeadStatistics::results() const {
  std::vector<HeadStat> out;
  for (const std::string& module : order_) {
    const std::vector<Sums>& heads = sums_.at(module);
    for (size_t h = 0; h < heads.size(); ++h) {
      const Sums& s = heads[h];
      const double n = static_cast<double>(std::max<int64_t>(s.rows, 1));
      out.push_back({module, static_cast<int64_t>(h), s.entropy / n, s.uniform / n, s.distance / n,
                     s.max_weight / n, s.rows});
    }
  }
  return out;
}

double masked_heads_loss(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches, int64_t pad_id) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  CrossEntropyOptions ce;
  ce.ignore_index = pad_id;
  ce.reduction = Reduction::sum;
  double total = 0, tokens = 0;
  for (const AblationBatch& b : batches) {
    Tensor logits = model.forward(b.src, b.tgt_in, b.src_key_padding_mask);  // [B, T, V]
    Tensor target = b.tgt_out.reshape({-1});
    total += cross_entropy(logits.reshape({-1, logits.size(2)}), target, ce).item();
    for (double id : target.to_vector<double>()) tokens += static_cast<double>(id != static_cast<double>(pad_id));
  }
  if (was_training) model.train();
  return total / std::max(tokens, 1.0);
}

std::vector<HeadAblation> ablate_heads(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches,
                                       int64_t pad_id, double* baseline) {
  const double base = masked_heads_loss(model, batches, pad_id);
  if (baseline) *baseline = base;
  const int64_t H = model.config.heads;
  const DType dt = model.parameters().front().dtype();
  std::vector<HeadAblation> out;
  for (const auto& attention : attention_modules(model))
    for (int64_t h = 0; h < H; ++h) {
      const std::string& target = attention.first;
      std::vector<double> keep(static_cast<size_t>(H), 1.0);
      keep[static_cast<size_t>(h)] = 0.0;
      const Tensor scale = Tensor::from_vector(keep, {H}, dt);
      AttentionObserverGuard remove(model, [&](const std::string& name) -> AttentionObserver {
        if (name != target) return nullptr;
        return [&scale](AttentionCall& call) { call.head_scale = scale; };
      });
      const double loss = masked_heads_loss(model, batches, pad_id);
      out.push_back({target, h, loss, loss - base});
    }
  return out;
}

HeadMask full_head_mask(const Seq2SeqTransformer& model) {
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

HeadMaskGuard::HeadMaskGuard(Seq2SeqTransformer& model, const HeadMask& mask)
    : scales_([&] {
        const DType dt = model.parameters().front().dtype();
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

std::vector<HeadImportance> head_importance(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches,
                                            int64_t pad_id, const HeadMask& mask) {
  const bool was_training = model.is_training();
  model.eval();
  const DType dt = model.parameters().front().dtype();
  const auto modules = attention_modules(model);
  std::vector<std::vector<double>> sums(modules.size());
  for (size_t m = 0; m < modules.size(); ++m) sums[m].assign(static_cast<size_t>(modules[m].second->num_heads), 0.0);

  CrossEntropyOptions ce;
  ce.ignore_index = pad_id;
  for (const AblationBatch& b : batches) {
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
    const Tensor logits = model.forward(b.src, b.tgt_in, b.src_key_padding_mask);  // [B, T, V]
    const Tensor loss = cross_entropy(logits.reshape({-1, logits.size(2)}), b.tgt_out.reshape({-1}), ce);
    const std::vector<Tensor> dxi = grad({loss}, gates);
    for (size_t m = 0; m < modules.size(); ++m) {
      const std::vector<double> g = dxi[m].to_vector<double>();
      for (size_t h = 0; h < g.size(); ++h) sums[m][h] += std::abs(g[h]);
    }
  }
  if (was_training) model.train();

  std::vector<HeadImportance> out;
  const double n = static_cast<double>(std::max<size_t>(batches.size(), 1));
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

}  // namespace attograd::app::heads
