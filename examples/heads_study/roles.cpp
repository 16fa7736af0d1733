#include "examples/heads_study/roles.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/generator.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/autograd/ops/loss.h>
#include "examples/heads_study/head_stats.h"

namespace attograd::app::heads {

std::string role_slot_name(int slot) {
  return slot == kContent ? "content" : role_name(static_cast<Role>(slot));
}

SentenceBootstrap::SentenceBootstrap(int64_t sentences, int64_t resamples, uint64_t seed) : n_(sentences) {
  Generator gen(seed);
  draws_.resize(static_cast<size_t>(resamples));
  for (std::vector<int64_t>& d : draws_) {
    d.resize(static_cast<size_t>(n_));
    for (int64_t& i : d) i = static_cast<int64_t>(gen.randint(static_cast<uint64_t>(std::max<int64_t>(n_, 1))));
  }
}

std::vector<Estimate> SentenceBootstrap::intervals(
    const std::function<std::vector<double>(const std::vector<int64_t>&)>& statistic) const {
  std::vector<int64_t> all(static_cast<size_t>(n_));
  std::iota(all.begin(), all.end(), 0);
  const std::vector<double> value = statistic(all);
  std::vector<std::vector<double>> samples(value.size());
  for (const std::vector<int64_t>& d : draws_) {
    if (n_ == 0) break;
    const std::vector<double> v = statistic(d);
    for (size_t k = 0; k < v.size(); ++k) samples[k].push_back(v[k]);
  }
  std::vector<Estimate> out;
  for (size_t k = 0; k < value.size(); ++k) {
    std::vector<double>& v = samples[k];
    if (v.empty()) {
      out.push_back({value[k], value[k], value[k]});
      continue;
    }
    std::sort(v.begin(), v.end());
    auto at = [&](double q) { return v[static_cast<size_t>(std::lround(q * static_cast<double>(v.size() - 1)))]; };
    out.push_back({value[k], at(0.025), at(0.975)});
  }
  return out;
}

Estimate SentenceBootstrap::interval(const std::function<double(const std::vector<int64_t>&)>& statistic) const {
  return intervals([&](const std::vector<int64_t>& sample) { return std::vector<double>{statistic(sample)}; }).front();
}

Estimate SentenceBootstrap::ratio(const std::vector<double>& num, const std::vector<double>& den) const {
  return interval([&](const std::vector<int64_t>& sample) {
    double a = 0, b = 0;
    for (int64_t i : sample) {
      a += num[static_cast<size_t>(i)];
      b += den[static_cast<size_t>(i)];
    }
    return b > 0 ? a / b : 0.0;
  });
}

namespace {

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[order[k]] = 0.5 * static_cast<double>(i + j);
    i = j + 1;
  }
  return r;
}

}  // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2)
    fail<ValueError>("spearman", "needs two samples of the same size >= 2, got {} and {}", a.size(), b.size());
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double mean = 0.5 * static_cast<double>(a.size() - 1);
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

std::vector<AlignedSentence> gold_split(const std::string& data_dir, const std::string& split, const std::string& lang,
                                        int64_t limit) {
  const ParallelText english = read_split(data_dir, split, lang);
  const ParallelText numbers = read_parallel_tsv(data_dir + "/" + split + ".tsv", "number", lang);
  std::vector<AlignedSentence> out;
  for (int64_t i = 0; i < std::min(limit, numbers.size()); ++i) {
    const std::string& digits = numbers.sources[static_cast<size_t>(i)];
    const bool integer = !digits.empty() && digits.size() < 10 &&
                         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!integer)
      fail<IOError>("gold_split", "{} line {}: the number column holds '{}', not an integer; hint: the corpus's "
                    "first column is the number its row spells", numbers.name, numbers.line_numbers[static_cast<size_t>(i)],
                    digits);
    AlignedSentence s = align_number(std::stoll(digits), lang);
    const std::string src = source_text(s), tgt = target_text(s);
    if (src != english.sources[static_cast<size_t>(i)] || tgt != numbers.targets[static_cast<size_t>(i)])
      fail<Error>("gold_split", "{} line {}: {} is '{}' / '{}' in the corpus but '{}' / '{}' by align_number; "
                  "hint: the gold alignments follow the corpus's spelling rules (alignment.cpp)",
                  numbers.name, numbers.line_numbers[static_cast<size_t>(i)], digits,
                  english.sources[static_cast<size_t>(i)], numbers.targets[static_cast<size_t>(i)], src, tgt);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<RoleCounts> score_alignment(const std::vector<AlignedSentence>& gold,
                                        const std::function<int64_t(size_t sentence, size_t t)>& predict) {
  std::vector<RoleCounts> out(gold.size());
  for (size_t i = 0; i < gold.size(); ++i)
    for (size_t t = 0; t < gold[i].target.size(); ++t) {
      const AlignedToken& tok = gold[i].target[t];
      const int64_t p = predict(i, t);
      const double hit = std::binary_search(tok.sources.begin(), tok.sources.end(), p) ? 1.0 : 0.0;
      for (int r = 0; r < kRoleCount; ++r)
        if (tok.has(static_cast<Role>(r))) {
          out[i].tokens[static_cast<size_t>(r)] += 1;
          out[i].hits[static_cast<size_t>(r)] += hit;
        }
      if (!tok.has(Role::connector) && !tok.has(Role::eos)) {
        out[i].tokens[kContent] += 1;
        out[i].hits[kContent] += hit;
      }
    }
  return out;
}

namespace {

// Sentences as the model reads them (the gold tokens; <eos> is added by collate).
Example gold_example(const Translator& tr, const AlignedSentence& s) {
  std::vector<std::string> src(s.source.begin(), s.source.end() - 1), tgt;
  for (size_t t = 0; t + 1 < s.target.size(); ++t) tgt.push_back(s.target[t].text);
  return {tr.src_vocab.encode(src), tr.tgt_vocab.encode(tgt)};
}

int64_t layer_of(const std::string& module) {  // "decoder.layers.1.cross_attn" -> 1
  const size_t at = module.find("layers.");
  if (at == std::string::npos)
    fail<ValueError>("roles", "attention module '{}' has no 'layers.<n>' in its name", module);
  const size_t a = at + 7;
  return std::stoll(module.substr(a, module.find('.', a) - a));
}

}  // namespace

std::vector<HeadArgmax> cross_attention_argmax(Seq2SeqTransformer& model, const Translator& tr,
                                               const std::vector<AlignedSentence>& gold) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<HeadArgmax> out;
  std::map<std::string, size_t> first;  // module -> its head 0 in out
  for (const auto& [name, m] : attention_modules(model)) {
    if (!name.ends_with("cross_attn")) continue;
    first[name] = out.size();
    for (int64_t h = 0; h < m->num_heads; ++h) out.push_back({name, layer_of(name), h, {}});
  }
  for (size_t start = 0; start < gold.size(); start += 64) {
    const size_t end = std::min(gold.size(), start + 64);
    std::vector<Example> ex;
    for (size_t i = start; i < end; ++i) ex.push_back(gold_example(tr, gold[i]));
    const Batch b = collate(ex);
    std::map<std::string, Tensor> weights;  // [B, H, T, S]
    {
      AttentionObserverGuard observe(model, [&](const std::string& name) -> AttentionObserver {
        if (!first.contains(name)) return nullptr;
        return [&weights, name](AttentionCall& call) { weights[name] = call.weights; };
      });
      model.forward(b.src, b.tgt_in, b.src_key_padding_mask, b.tgt_key_padding_mask);
    }
    for (const auto& [name, w] : weights) {
      const std::vector<double> v = w.to_vector<double>();
      const int64_t H = w.size(1), T = w.size(2), S = w.size(3);
      for (int64_t h = 0; h < H; ++h)
        for (size_t i = start; i < end; ++i) {
          const int64_t bi = static_cast<int64_t>(i - start);
          std::vector<int64_t> row_argmax;
          for (size_t t = 0; t < gold[i].target.size(); ++t) {
            const double* row = v.data() + ((bi * H + h) * T + static_cast<int64_t>(t)) * S;
            row_argmax.push_back(std::max_element(row, row + gold[i].source.size()) - row);
          }
          out[first.at(name) + static_cast<size_t>(h)].argmax.push_back(std::move(row_argmax));
        }
    }
  }
  if (was_training) model.train();
  return out;
}

namespace {

constexpr int64_t kResamples = 1000;

std::array<Estimate, kRoleSlots> slot_accuracy(const SentenceBootstrap& boot, const std::vector<RoleCounts>& counts) {
  std::array<Estimate, kRoleSlots> out;
  for (size_t r = 0; r < kRoleSlots; ++r) {
    std::vector<double> hits, tokens;
    for (const RoleCounts& c : counts) {
      hits.push_back(100 * c.hits[r]);
      tokens.push_back(c.tokens[r]);
    }
    out[r] = boot.ratio(hits, tokens);
  }
  return out;
}

std::array<double, kRoleSlots> totals(const std::vector<RoleCounts>& counts, bool hits) {
  std::array<double, kRoleSlots> out{};
  for (const RoleCounts& c : counts)
    for (size_t r = 0; r < kRoleSlots; ++r) out[r] += hits ? c.hits[r] : c.tokens[r];
  return out;
}

AlignmentBaselines alignment_baselines(const std::vector<AlignedSentence>& gold, const SentenceBootstrap& boot) {
  AlignmentBaselines out;
  const std::vector<RoleCounts> diagonal = score_alignment(gold, [&](size_t i, size_t t) {
    const double S = static_cast<double>(gold[i].source.size()), T = static_cast<double>(gold[i].target.size());
    return T > 1 ? std::llround(static_cast<double>(t) * (S - 1) / (T - 1)) : int64_t{0};
  });
  out.diagonal = slot_accuracy(boot, diagonal);
  out.tokens = totals(diagonal, false);
  int64_t longest_t = 1, longest_s = 1;
  for (const AlignedSentence& s : gold) {
    longest_t = std::max<int64_t>(longest_t, static_cast<int64_t>(s.target.size()));
    longest_s = std::max<int64_t>(longest_s, static_cast<int64_t>(s.source.size()));
  }
  std::array<double, kRoleSlots> best{};
  best.fill(-1);
  std::array<std::vector<RoleCounts>, kRoleSlots> best_counts;
  for (int64_t k = -longest_t; k <= longest_s; ++k) {
    std::vector<RoleCounts> c = score_alignment(gold, [&](size_t i, size_t t) {
      return std::clamp<int64_t>(static_cast<int64_t>(t) + k, 0, static_cast<int64_t>(gold[i].source.size()) - 1);
    });
    const std::array<double, kRoleSlots> hits = totals(c, true);
    for (size_t r = 0; r < kRoleSlots; ++r)
      if (hits[r] > best[r]) {
        best[r] = hits[r];
        out.best_offset[r] = k;
        best_counts[r] = c;
      }
  }
  for (size_t r = 0; r < kRoleSlots; ++r) out.offset[r] = slot_accuracy(boot, best_counts[r])[r];
  return out;
}

std::vector<int> dedicated_roles(const std::vector<RoleCounts>& counts, const std::array<Estimate, kRoleSlots>& acc,
                                 const AlignmentBaselines& base) {
  const std::array<double, kRoleSlots> hits = totals(counts, true), tokens = totals(counts, false);
  std::vector<int> out;
  for (int r = 0; r < kRoleCount; ++r) {
    if (r == static_cast<int>(Role::connector) || tokens[static_cast<size_t>(r)] == 0) continue;
    const bool content = r != static_cast<int>(Role::eos);
    const double other_hits = content ? hits[kContent] - hits[static_cast<size_t>(r)] : hits[kContent];
    const double other_tokens = content ? tokens[kContent] - tokens[static_cast<size_t>(r)] : tokens[kContent];
    const double other = other_tokens > 0 ? 100 * other_hits / other_tokens : 0.0;
    const Estimate& a = acc[static_cast<size_t>(r)];
    const double baseline = std::max(base.diagonal[static_cast<size_t>(r)].value, base.offset[static_cast<size_t>(r)].value);
    if (a.lo >= baseline + kDedicatedMargin && a.value >= other + kDedicatedMargin) out.push_back(r);
  }
  return out;
}

// The summed cross-entropy of each sentence's target tokens (teacher-forced, eval mode).
std::vector<double> sentence_losses(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches) {
  NoGradGuard no_grad;
  CrossEntropyOptions ce;
  ce.ignore_index = kPadId;
  ce.reduction = Reduction::none;
  std::vector<double> out;
  for (const AblationBatch& b : batches) {
    const Tensor logits = model.forward(b.src, b.tgt_in, b.src_key_padding_mask);  // [B, T, V]
    const std::vector<double> rows =
        cross_entropy(logits.reshape({-1, logits.size(2)}), b.tgt_out.reshape({-1}), ce).to_vector<double>();
    const int64_t B = b.tgt_out.size(0), T = b.tgt_out.size(1);
    for (int64_t i = 0; i < B; ++i)
      out.push_back(std::accumulate(rows.begin() + i * T, rows.begin() + (i + 1) * T, 0.0));
  }
  return out;
}

// Per sentence and head ([sentence][head], heads in attention_modules order) of every score.
struct SentenceScores {
  std::vector<std::vector<double>> gradient, ablation, entropy, ceiling, peak, rows;
  std::vector<double> tokens;
};

SentenceScores sentence_scores(Seq2SeqTransformer& model, const VectorDataset& valid, int64_t n) {
  const bool was_training = model.is_training();
  model.eval();
  SentenceScores s;
  const HeadMask full = full_head_mask(model);
  std::map<std::string, size_t> offsets;  // module -> its head 0 in attention_modules order
  size_t total = 0;
  for (const auto& [name, m] : attention_modules(model)) {
    offsets[name] = total;
    total += static_cast<size_t>(m->num_heads);
  }
  for (const AblationBatch& one : first_batches(valid, n, 1)) {
    std::vector<double> g;
    for (const HeadImportance& h : head_importance(model, {one}, kPadId, full)) g.push_back(h.importance);
    s.gradient.push_back(std::move(g));
    HeadStatistics stats;
    stats.add_batch(model, one.src, one.tgt_in, one.src_key_padding_mask, Tensor());
    const size_t heads = s.gradient.back().size();
    std::vector<double> e(heads), c(heads), p(heads), r(heads);
    for (const HeadStat& h : stats.results()) {
      const size_t at = offsets.at(h.module) + static_cast<size_t>(h.head);
      const double rows = static_cast<double>(h.rows);
      e[at] = h.entropy * rows;
      c[at] = h.uniform_entropy * rows;
      p[at] = h.max_weight * rows;
      r[at] = rows;
    }
    s.entropy.push_back(std::move(e));
    s.ceiling.push_back(std::move(c));
    s.peak.push_back(std::move(p));
    s.rows.push_back(std::move(r));
    double tokens = 0;
    for (double id : one.tgt_out.to_vector<double>()) tokens += id != static_cast<double>(kPadId);
    s.tokens.push_back(tokens);
  }
  const std::vector<AblationBatch> batches = first_batches(valid, n);
  const std::vector<double> base = sentence_losses(model, batches);
  s.ablation.assign(base.size(), {});
  for (const auto& [name, m] : attention_modules(model))
    for (int64_t h = 0; h < m->num_heads; ++h) {
      HeadMask mask = full;
      mask.at(name)[static_cast<size_t>(h)] = 0.0;
      HeadMaskGuard guard(model, mask);
      const std::vector<double> loss = sentence_losses(model, batches);
      for (size_t i = 0; i < loss.size(); ++i) s.ablation[i].push_back(loss[i] - base[i]);
    }
  if (was_training) model.train();
  return s;
}

// Score k of every head over a sample of sentences.
using HeadVector = std::function<std::vector<double>(const std::vector<int64_t>& sample)>;

HeadVector summed(const std::vector<std::vector<double>>& num, const std::vector<std::vector<double>>* den,
                  const std::vector<double>* den_per_sentence, bool square = false) {
  return [&num, den, den_per_sentence, square](const std::vector<int64_t>& sample) {
    const size_t heads = num.front().size();
    std::vector<double> a(heads, 0.0), b(heads, 0.0);
    for (int64_t i : sample)
      for (size_t h = 0; h < heads; ++h) {
        const double x = num[static_cast<size_t>(i)][h];
        a[h] += square ? x * x : x;
        b[h] += den ? (*den)[static_cast<size_t>(i)][h] : den_per_sentence ? (*den_per_sentence)[static_cast<size_t>(i)] : 1.0;
      }
    for (size_t h = 0; h < heads; ++h) a[h] = b[h] > 0 ? a[h] / b[h] : 0.0;
    return a;
  };
}

}  // namespace

ModelRoles analyse_roles(const StudyOptions& o, const Translator& tr, Seq2SeqTransformer& model,
                         const std::vector<AlignedSentence>& test, const VectorDataset& valid,
                         const VectorDataset& train, uint64_t seed) {
  ModelRoles out;
  out.seed = seed;
  out.heads = model.config.heads;
  out.sentences = static_cast<int64_t>(test.size());
  const SentenceBootstrap boot(out.sentences, kResamples, mix_seed(seed, 0xa119u));
  out.baselines = alignment_baselines(test, boot);
  for (const HeadArgmax& head : cross_attention_argmax(model, tr, test)) {
    const std::vector<RoleCounts> counts =
        score_alignment(test, [&](size_t i, size_t t) { return head.argmax[i][t]; });
    HeadRoles h{head.module, head.layer, head.head, slot_accuracy(boot, counts), {}};
    h.dedicated = dedicated_roles(counts, h.accuracy, out.baselines);
    out.cross.push_back(std::move(h));
  }

  const SentenceScores s = sentence_scores(model, valid, o.ablation_size);
  out.scored_sentences = static_cast<int64_t>(s.tokens.size());
  const SentenceBootstrap vboot(out.scored_sentences, kResamples, mix_seed(seed, 0xf15eu));
  const std::vector<std::pair<std::string, HeadVector>> score_fns = {
      {"importance", summed(s.gradient, nullptr, nullptr)},
      {"fisher", summed(s.gradient, nullptr, nullptr, true)},
      {"ablation", summed(s.ablation, nullptr, &s.tokens)},
      {"entropy", summed(s.entropy, &s.ceiling, nullptr)},
      {"confidence", summed(s.peak, &s.rows, nullptr)},
  };
  // One statistic per sample: every score of every head, then the Spearman ρ of every pair of scores.
  const size_t kinds = score_fns.size();
  const std::vector<Estimate> all = vboot.intervals([&](const std::vector<int64_t>& sample) {
    std::vector<std::vector<double>> v;
    for (const auto& [name, fn] : score_fns) v.push_back(fn(sample));
    std::vector<double> flat;
    for (const std::vector<double>& x : v) flat.insert(flat.end(), x.begin(), x.end());
    for (size_t a = 0; a < kinds; ++a)
      for (size_t b = a + 1; b < kinds; ++b) flat.push_back(spearman(v[a], v[b]));
    return flat;
  });
  size_t heads = 0;
  for (const auto& [name, m] : attention_modules(model))
    for (int64_t i = 0; i < m->num_heads; ++i, ++heads) out.scores.push_back({name, i, {}, {}, {}, {}, {}});
  for (size_t h = 0; h < heads; ++h) {
    HeadScore& x = out.scores[h];
    x.importance = all[h];
    x.fisher = all[heads + h];
    x.ablation = all[2 * heads + h];
    x.entropy = all[3 * heads + h];
    x.confidence = all[4 * heads + h];
  }
  size_t at = kinds * heads;
  for (size_t a = 0; a < kinds; ++a)
    for (size_t b = a + 1; b < kinds; ++b) out.correlations.push_back({score_fns[a].first, score_fns[b].first, all[at++]});

  std::vector<double> ablation;
  for (const HeadScore& x : out.scores) ablation.push_back(x.ablation.value);
  const HeadMask full = full_head_mask(model);
  for (const auto& [name, data] : {std::pair<std::string, const VectorDataset*>{"valid", &valid}, {"train", &train}})
    for (int64_t batch : {1, 64}) {
      std::vector<double> imp;
      for (const HeadImportance& x : head_importance(model, first_batches(*data, o.ablation_size, batch), kPadId, full))
        imp.push_back(x.importance);
      out.controls.push_back({name, batch, heads > 1 ? spearman(imp, ablation) : 0.0});
    }
  return out;
}

std::vector<int64_t> best_matching(const std::vector<std::vector<double>>& cost) {
  const size_t n = cost.size();
  if (n > 8)
    fail<ValueError>("best_matching", "searches all n! matchings, so n must be <= 8, got {}; hint: match larger "
                     "head counts with scipy's linear_sum_assignment", n);
  std::vector<int64_t> p(n), best;
  std::iota(p.begin(), p.end(), 0);
  double least = 0;
  do {
    double c = 0;
    for (size_t i = 0; i < n; ++i) c += cost[i][static_cast<size_t>(p[i])];
    if (best.empty() || c < least) {
      least = c;
      best = p;
    }
  } while (std::next_permutation(p.begin(), p.end()));
  return best;
}

namespace {

std::string ci(const Estimate& x, int digits) {
  return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", x.value, digits, x.lo, digits, x.hi, digits);
}

std::string ci_sci(const Estimate& x) { return fmt::format("{:.2e} [{:.2e}, {:.2e}]", x.value, x.lo, x.hi); }

nlohmann::json ci_json(const Estimate& x) { return {{"value", x.value}, {"lo", x.lo}, {"hi", x.hi}}; }

std::string head_name(const HeadRoles& h) { return fmt::format("L{}H{}", h.layer, h.head); }

// The role slots that occur in the split (connectors excluded: they only glue).
std::vector<int> reported_slots(const AlignmentBaselines& b) {
  std::vector<int> out = {kContent};
  for (int r = 0; r < kRoleCount; ++r)
    if (r != static_cast<int>(Role::connector) && b.tokens[static_cast<size_t>(r)] > 0) out.push_back(r);
  return out;
}

// Euclidean distance between two heads' role-accuracy vectors (percent points).
double role_distance(const HeadRoles& a, const HeadRoles& b, const std::vector<int>& slots) {
  double d = 0;
  for (int r : slots) {
    const double x = a.accuracy[static_cast<size_t>(r)].value - b.accuracy[static_cast<size_t>(r)].value;
    d += x * x;
  }
  return std::sqrt(d);
}

// For every cross head of `other`, the index of seed 1's head it is matched to (within its layer).
std::vector<size_t> match_to_first(const ModelRoles& first, const ModelRoles& other, const std::vector<int>& slots) {
  std::vector<size_t> out(other.cross.size());
  std::map<int64_t, std::vector<size_t>> a, b;  // layer -> head indices
  for (size_t i = 0; i < first.cross.size(); ++i) a[first.cross[i].layer].push_back(i);
  for (size_t i = 0; i < other.cross.size(); ++i) b[other.cross[i].layer].push_back(i);
  for (const auto& [layer, xs] : a) {
    const std::vector<size_t>& ys = b.at(layer);
    std::vector<std::vector<double>> cost(xs.size(), std::vector<double>(ys.size()));
    for (size_t i = 0; i < xs.size(); ++i)
      for (size_t j = 0; j < ys.size(); ++j) cost[i][j] = role_distance(first.cross[xs[i]], other.cross[ys[j]], slots);
    const std::vector<int64_t> p = best_matching(cost);
    for (size_t i = 0; i < xs.size(); ++i) out[ys[static_cast<size_t>(p[i])]] = xs[i];
  }
  return out;
}

}  // namespace

std::string write_roles_report(const StudyOptions& o, const std::string& lang, const std::vector<ModelRoles>& models) {
  if (models.empty()) fail<ValueError>("roles", "no models to report for {}", lang);
  const ModelRoles& first = models.front();
  const AlignmentBaselines& base = first.baselines;
  const std::vector<int> slots = reported_slots(base);
  std::string jsonl;
  std::string md = fmt::format(
      "## Head roles, en→{} (H = {}, {} seed(s), {} test sentences)\n\n"
      "Gold alignments are spelled from each row's number (examples/heads_study/alignment.h). A target token counts "
      "as aligned by a cross-attention head when the head's largest weight, in the decoder row that predicts the "
      "token (teacher-forced on the gold target), is on one of its gold source tokens. Accuracy is percent of the "
      "role's tokens, with a 95% bootstrap interval over sentences ({} resamples); `content` is every token but "
      "connectors (hyphens, et, und) and <eos>. Baselines: the monotone diagonal s = round(t·(S−1)/(T−1)) and the "
      "best fixed offset s = t + k per role (Clark et al. 2019).\n\n",
      lang, first.heads, models.size(), first.sentences, kResamples);

  md += "| role | tokens | diagonal % | best offset k | offset % |\n|---|---|---|---|---|\n";
  for (int r : slots) {
    const size_t i = static_cast<size_t>(r);
    md += fmt::format("| {} | {:.0f} | {} | {:+d} | {} |\n", role_slot_name(r), base.tokens[i], ci(base.diagonal[i], 1),
                      base.best_offset[i], ci(base.offset[i], 1));
    jsonl += nlohmann::json{{"kind", "baseline"}, {"lang", lang}, {"role", role_slot_name(r)}, {"tokens", base.tokens[i]},
                            {"diagonal", ci_json(base.diagonal[i])}, {"offset", ci_json(base.offset[i])},
                            {"best_offset", base.best_offset[i]}}.dump() + "\n";
  }

  std::string header = "| seed | head |", rule = "|---|---|";
  for (int r : slots) {
    header += fmt::format(" {} |", role_slot_name(r));
    rule += "---|";
  }
  md += "\n### Alignment accuracy per cross-attention head (percent)\n\n" + header + " dedicated to |\n" + rule + "---|\n";
  for (const ModelRoles& m : models)
    for (const HeadRoles& h : m.cross) {
      md += fmt::format("| {} | {} |", m.seed, head_name(h));
      nlohmann::json acc = nlohmann::json::object();
      for (int r : slots) {
        const Estimate& a = h.accuracy[static_cast<size_t>(r)];
        md += r == kContent ? fmt::format(" {} |", ci(a, 1)) : fmt::format(" {:.1f} |", a.value);
        acc[role_slot_name(r)] = ci_json(a);
      }
      std::vector<std::string> names;
      for (int r : h.dedicated) names.push_back(role_slot_name(r));
      md += fmt::format(" {} |\n", names.empty() ? "-" : fmt::format("{}", fmt::join(names, ", ")));
      jsonl += nlohmann::json{{"kind", "cross_head"}, {"lang", lang}, {"seed", m.seed}, {"module", h.module},
                              {"layer", h.layer}, {"head", h.head}, {"accuracy", acc}, {"dedicated", names},
                              {"exact_match", m.exact_match}}.dump() + "\n";
    }

  md += fmt::format("\n### Dedicated heads\n\nA head is dedicated to a role when the lower end of its interval is at "
                    "least {:.0f} points above both baselines and its accuracy on the role at least {:.0f} points above "
                    "its accuracy on the other content tokens.\n\n", kDedicatedMargin, kDedicatedMargin);
  for (int r : slots) {
    if (r == kContent) continue;
    std::vector<std::string> found;
    int64_t seeds_with = 0;
    for (const ModelRoles& m : models) {
      bool any = false;
      for (const HeadRoles& h : m.cross)
        if (std::find(h.dedicated.begin(), h.dedicated.end(), r) != h.dedicated.end()) {
          found.push_back(fmt::format("seed {} {} ({})", m.seed, head_name(h), ci(h.accuracy[static_cast<size_t>(r)], 1)));
          any = true;
        }
      seeds_with += any;
    }
    md += fmt::format("- {}: {} of {} seeds{}{}\n", role_slot_name(r), seeds_with, models.size(), found.empty() ? "" : ": ",
                      fmt::join(found, "; "));
  }

  // Seeds matched to seed 1 within each layer, by their role-accuracy vectors.
  if (models.size() > 1) {
    md += "\n### Cross heads matched across seeds\n\nEach seed's cross heads are matched to seed 1's within each layer "
          "by the least total Euclidean distance between role-accuracy vectors (all matchings searched). A dedicated "
          "head of seed 1 recurs when its match is dedicated to the same role. ρ: Spearman correlation, over the "
          "matched cross heads, of seed 1's score and its match's.\n\n"
          "| seed | matches (seed 1 → this seed, distance) | dedicated heads of seed 1 that recur | ρ ablation | "
          "ρ importance |\n|---|---|---|---|---|\n";
    for (size_t k = 1; k < models.size(); ++k) {
      const ModelRoles& m = models[k];
      const std::vector<size_t> to_first = match_to_first(first, m, slots);
      std::vector<std::string> pairs;
      int64_t dedicated = 0, recur = 0;
      std::vector<double> abl_a, abl_b, imp_a, imp_b;
      auto score_of = [](const ModelRoles& x, const HeadRoles& h) -> const HeadScore& {
        for (const HeadScore& s : x.scores)
          if (s.module == h.module && s.head == h.head) return s;
        fail<Error>("roles", "no scores for {} head {}", h.module, h.head);
      };
      for (size_t j = 0; j < m.cross.size(); ++j) {
        const HeadRoles &a = first.cross[to_first[j]], &b = m.cross[j];
        const double d = role_distance(a, b, slots);
        pairs.push_back(fmt::format("{}→{} ({:.0f})", head_name(a), head_name(b), d));
        for (int r : a.dedicated) {
          ++dedicated;
          recur += std::find(b.dedicated.begin(), b.dedicated.end(), r) != b.dedicated.end();
        }
        abl_a.push_back(score_of(first, a).ablation.value);
        abl_b.push_back(score_of(m, b).ablation.value);
        imp_a.push_back(score_of(first, a).importance.value);
        imp_b.push_back(score_of(m, b).importance.value);
        jsonl += nlohmann::json{{"kind", "match"}, {"lang", lang}, {"seed", m.seed}, {"layer", b.layer},
                                {"head", b.head}, {"seed1_head", a.head}, {"distance", d}}.dump() + "\n";
      }
      const double rho_abl = abl_a.size() > 1 ? spearman(abl_a, abl_b) : 0.0;
      const double rho_imp = imp_a.size() > 1 ? spearman(imp_a, imp_b) : 0.0;
      md += fmt::format("| {} | {} | {} of {} | {:+.2f} | {:+.2f} |\n", m.seed, fmt::join(pairs, ", "), recur, dedicated,
                        rho_abl, rho_imp);
      jsonl += nlohmann::json{{"kind", "match_summary"}, {"lang", lang}, {"seed", m.seed}, {"dedicated", dedicated},
                              {"recur", recur}, {"rho_ablation", rho_abl}, {"rho_importance", rho_imp}}.dump() + "\n";
    }
  }

  md += fmt::format(
      "\n### Head scores (experiment 4)\n\nOn the first {} validation sentences, one sentence at a time: importance = "
      "mean |∂L/∂ξ_h| and Fisher = mean (∂L/∂ξ_h)² per sentence (L: the sentence's mean teacher-forced cross-entropy, ξ_h "
      "the head's gate at 1); ablation Δ = the change of the summed loss per target token with the head's output "
      "zeroed; entropy as a share of the uniform ceiling; confidence = mean largest weight (Voita et al. 2019). 95% "
      "bootstrap intervals over sentences.\n\n"
      "| seed | module | head | importance | Fisher | ablation Δ loss | entropy / ceiling | confidence |\n"
      "|---|---|---|---|---|---|---|---|\n", first.scored_sentences);
  for (const ModelRoles& m : models)
    for (const HeadScore& s : m.scores) {
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", m.seed, s.module, s.head, ci_sci(s.importance),
                        ci_sci(s.fisher), ci(s.ablation, 4), ci(s.entropy, 3), ci(s.confidence, 3));
      jsonl += nlohmann::json{{"kind", "head_score"}, {"lang", lang}, {"seed", m.seed}, {"module", s.module},
                              {"head", s.head}, {"importance", ci_json(s.importance)}, {"fisher", ci_json(s.fisher)},
                              {"ablation", ci_json(s.ablation)}, {"entropy", ci_json(s.entropy)},
                              {"confidence", ci_json(s.confidence)}}.dump() + "\n";
    }

  md += "\n### Spearman correlations between the scores, over all heads\n\n| pair |";
  for (const ModelRoles& m : models) md += fmt::format(" seed {} |", m.seed);
  md += " mean over seeds |\n|---|";
  for (size_t k = 0; k <= models.size(); ++k) md += "---|";
  md += "\n";
  for (size_t p = 0; p < first.correlations.size(); ++p) {
    md += fmt::format("| {} vs {} |", first.correlations[p].a, first.correlations[p].b);
    double mean = 0;
    for (const ModelRoles& m : models) {
      const ScoreCorrelation& c = m.correlations[p];
      md += fmt::format(" {} |", ci(c.rho, 2));
      mean += c.rho.value / static_cast<double>(models.size());
      jsonl += nlohmann::json{{"kind", "correlation"}, {"lang", lang}, {"seed", m.seed}, {"a", c.a}, {"b", c.b},
                              {"rho", ci_json(c.rho)}}.dump() + "\n";
    }
    md += fmt::format(" {:+.2f} |\n", mean);
  }
  md += fmt::format("\n### Importance measured four ways\n\nSpearman ρ over all heads between importance (mean |∂L/∂ξ_h| "
                    "over gradients of 1 or 64 sentences, on the first {} sentences of a split) and ablation Δ on "
                    "validation sentences: which of the data and the batching makes importance rank heads like "
                    "ablation.\n\n| data | sentences per gradient |", first.scored_sentences);
  for (const ModelRoles& m : models) md += fmt::format(" seed {} |", m.seed);
  md += "\n|---|---|";
  for (size_t k = 0; k < models.size(); ++k) md += "---|";
  md += "\n";
  for (size_t c = 0; c < first.controls.size(); ++c) {
    md += fmt::format("| {} | {} |", first.controls[c].data, first.controls[c].batch);
    for (const ModelRoles& m : models) {
      const ImportanceControl& x = m.controls[c];
      md += fmt::format(" {:+.2f} |", x.rho_ablation);
      jsonl += nlohmann::json{{"kind", "importance_control"}, {"lang", lang}, {"seed", m.seed}, {"data", x.data},
                              {"batch", x.batch}, {"rho_ablation", x.rho_ablation}}.dump() + "\n";
    }
    md += "\n";
  }
  md += "\nExact match of the models (greedy, test): ";
  for (size_t k = 0; k < models.size(); ++k)
    md += fmt::format("{}seed {} {:.1f}%", k ? ", " : "", models[k].seed, models[k].exact_match);
  md += ".\n";
  write_file_atomic(o.out_dir + "/roles-" + lang + ".md", md);
  write_file_atomic(o.out_dir + "/roles-" + lang + ".jsonl", jsonl);
  return md;
}

std::string roles_study(const StudyOptions& o, const Corpus& corpus, const std::vector<RoleModel>& models) {
  const Translator& tr = corpus.translator;
  const std::string lang = tr.task.lang;
  const std::vector<AlignedSentence> test = gold_split(o.data_dir, "test", lang, o.roles_size);
  const VectorDataset valid = tr.encode(read_split(o.data_dir, "valid", lang));
  EvalOptions eo;
  eo.max_examples = o.eval_size;
  std::vector<ModelRoles> results;
  for (const RoleModel& m : models) {
    results.push_back(analyse_roles(o, tr, *m.model, test, valid, corpus.train, m.seed));
    results.back().exact_match = 100 * evaluate(*m.model, corpus.test, eo).exact_match;
  }
  return write_roles_report(o, lang, results);
}

}  // namespace attograd::app::heads
