#include "examples/heads_study/gqa_study.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/nn/generate.h>

namespace attograd::app::heads {

namespace {

// Mean and the half-width of its 95% t-interval over n values (n = 1: no interval).
struct SeedInterval {
  double mean = 0, half = 0;
  size_t n = 0;
};
SeedInterval ci95(const std::vector<double>& v) {
  static const double t975[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262};
  SeedInterval r;
  r.n = v.size();
  if (v.empty()) return r;
  for (double x : v) r.mean += x;
  r.mean /= static_cast<double>(v.size());
  if (v.size() < 2) return r;
  double ss = 0;
  for (double x : v) ss += (x - r.mean) * (x - r.mean);
  const double se = std::sqrt(ss / static_cast<double>(v.size() - 1) / static_cast<double>(v.size()));
  r.half = (v.size() - 2 < std::size(t975) ? t975[v.size() - 2] : 1.96) * se;
  return r;
}
std::string show(const SeedInterval& i, int digits) {
  if (i.n < 2) return fmt::format("{:.{}f}", i.mean, digits);
  return fmt::format("{:.{}f} ± {:.{}f}", i.mean, digits, i.half, digits);
}

TrainOptions quiet_training(const TrainOptions& base, int64_t steps, uint64_t seed, int64_t eval_size) {
  TrainOptions t = base;
  t.steps = steps;
  t.warmup = std::min(t.warmup, steps / 10);
  t.seed = seed;
  t.eval_every = 0;  // one evaluation, at the end, on the test split
  t.eval_size = eval_size;
  t.quiet = true;
  t.samples = 0;
  return t;
}

// Exact match (%), BLEU and loss on the test split.
struct Quality {
  double exact_match = 0, bleu = 0, loss = 0;
};
Quality quality_of(const EvalResult& e) {
  Quality q{100 * e.exact_match, 0, e.loss};
  for (const auto& [k, v] : e.extra)
    if (k == "bleu") q.bleu = v;
  return q;
}
// A model that has not just been evaluated: greedy decoding of o.eval_size test sentences.
Quality evaluate_quality(const StudyOptions& o, const Corpus& corpus, Seq2SeqTransformer& model) {
  EvalOptions eo;
  eo.max_examples = o.eval_size;
  EvalResult e = evaluate(model, corpus.test, eo);
  corpus.translator.add_metrics(e);
  return quality_of(e);
}

// Greedy decoding of batch b to each length with the cache: ms per step, and
// the cache's bytes after the same number of steps. The model is copied into
// one whose positional table reaches the longest length (the sinusoids are
// not parameters), so a model trained on short sentences can be timed at any t.
std::vector<CacheCost> cache_costs(const GqaOptions& g, Seq2SeqTransformer& trained, const Batch& b) {
  using clock = std::chrono::steady_clock;
  TransformerConfig cfg = trained.config;
  cfg.max_len = std::max(cfg.max_len, *std::max_element(g.lengths.begin(), g.lengths.end()) + 2);
  Generator gen(0);
  Seq2SeqTransformer model(cfg, gen, nullptr);
  model.load_state_dict(trained.state_dict());
  model.eval();
  const int64_t B = b.src.size(0), S = b.src.size(1), L = cfg.dec_layers, G = cfg.decoder_kv_heads(),
                D = cfg.d_model / cfg.heads;
  std::vector<CacheCost> out;
  for (int64_t t : g.lengths) {
    DecodeOptions d;
    d.max_len = t;
    d.eos_id = -1;  // no token ends a sequence: every row decodes t steps
    std::vector<double> ms;
    for (int64_t rep = 0; rep < g.repeats; ++rep) {
      const auto t0 = clock::now();
      greedy_decode(model, b.src, b.src_key_padding_mask, d);
      ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count() / static_cast<double>(t));
    }
    std::nth_element(ms.begin(), ms.begin() + static_cast<long>(ms.size() / 2), ms.end());
    KVCache cache = model.make_cache();
    {
      NoGradGuard no_grad;
      const Tensor memory = model.encode(b.src, b.src_key_padding_mask);
      const Tensor bos = Tensor::full({B, 1}, static_cast<double>(kBosId), DType::i64);
      for (int64_t step = 0; step < t; ++step) model.decode(bos, memory, b.src_key_padding_mask, Tensor(), &cache);
    }
    CacheCost c;
    c.t = t;
    c.bytes_used = cache.bytes_used();
    c.bytes_formula = static_cast<size_t>(2 * L * B * (t + S) * G * D * 4);
    c.bytes_allocated = cache.bytes_allocated();
    c.ms_per_token = ms[ms.size() / 2];
    if (c.bytes_used != c.bytes_formula)
      fail<Error>("gqa", "the cache holds {} bytes at t = {}, the formula 2·L·B·(t + S)·G·D·4 says {}", c.bytes_used,
                  t, c.bytes_formula);
    out.push_back(c);
  }
  return out;
}

// Everything measured on a model besides its quality (q, from its training's last evaluation or evaluate_quality).
GqaResult measure(const GqaOptions& g, const Corpus& corpus, const Batch& bench, Seq2SeqTransformer& model,
                  const Quality& q, const std::string& how, uint64_t seed, int64_t steps) {
  GqaResult r;
  r.lang = corpus.translator.task.lang;
  r.how = how;
  r.heads = model.config.heads;
  r.kv_heads = model.config.decoder_kv_heads();
  r.seed = seed;
  r.steps = steps;
  r.exact_match = q.exact_match;
  r.bleu = q.bleu;
  r.loss = q.loss;
  r.cache = cache_costs(g, model, bench);
  std::tie(r.max_logit_diff, r.max_abs_logit) = teacher_forced_vs_cached(model, corpus.test, g.logit_sentences);
  const CacheCost& last = r.cache.back();
  fmt::print("gqa {} {} G={} seed {}: exact match {:.1f}%  BLEU {:.1f}  loss {:.4f} | t={}: cache {} bytes, "
             "{:.2f} ms/token | max abs Δlogit {:.1e}\n", r.lang, how, r.kv_heads, seed, r.exact_match, r.bleu, r.loss,
             last.t, last.bytes_used, last.ms_per_token, r.max_logit_diff);
  std::fflush(stdout);
  return r;
}

Batch first_rows(const VectorDataset& data, int64_t n) {
  std::vector<Example> ex;
  for (int64_t i = 0; i < std::min(n, data.size()); ++i) ex.push_back(data.get(i));
  return collate(ex);
}

std::string report(const StudyOptions& o, const GqaOptions& g, const std::vector<GqaResult>& rs, int64_t S,
                   int64_t uptrain_steps) {
  const GqaResult& any = rs.front();
  const int64_t D = o.model.d_model / g.heads, L = o.model.dec_layers;
  std::string md = fmt::format(
      "## Grouped-query attention, en→{} (H = {}, D = {}, L = {} decoder layers)\n\n"
      "Quality: exact match (%) and BLEU of greedy decoding, test loss, on {} test sentences; mean ± half-width of "
      "the 95% t-interval over n seeds (no interval for n = 1). Scratch models train {} steps; converted ones are "
      "the scratch G = {} model of the same seed with its decoder K/V projections mean-pooled into G groups, scored "
      "before any training; uptrained ones are those after {} more steps. Cache: greedy decoding of B = {} test "
      "sources (S = {} with padding) to t tokens, EOS ignored; bytes used = 2·L·B·(t + S)·G·D·4 "
      "(checked), bytes allocated include the spare capacity; ms/token is the median of {} decodes.\n\n",
      any.lang, g.heads, D, L, o.eval_size, o.steps_for(any.lang), g.heads, uptrain_steps,
      g.batch, S, g.repeats);
  md += "| model | G | n | exact match % | BLEU | test loss | cache bytes/token/layer |";
  std::string rule = "|---|---|---|---|---|---|---|";
  for (int64_t t : g.lengths) {
    md += fmt::format(" used t={0} | allocated t={0} | ms/token t={0} |", t);
    rule += "---|---|---|";
  }
  md += " max abs Δlogit (max abs logit) |\n" + rule + "---|\n";
  std::map<std::pair<std::string, int64_t>, std::vector<const GqaResult*>> by;
  std::vector<std::pair<std::string, int64_t>> order;
  for (const GqaResult& r : rs) {
    const auto key = std::make_pair(r.how, r.kv_heads);
    if (by[key].empty()) order.push_back(key);
    by[key].push_back(&r);
  }
  for (const auto& key : order) {
    const auto& ms = by[key];
    std::vector<double> em, bleu, loss;
    double diff = 0, scale = 0;
    for (const GqaResult* r : ms) {
      em.push_back(r->exact_match);
      bleu.push_back(r->bleu);
      loss.push_back(r->loss);
      diff = std::max(diff, r->max_logit_diff);
      scale = std::max(scale, r->max_abs_logit);
    }
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} |", key.first, key.second, ms.size(), show(ci95(em), 1),
                      show(ci95(bleu), 1), show(ci95(loss), 4), 2 * key.second * D * 4);
    for (size_t i = 0; i < g.lengths.size(); ++i) {
      std::vector<double> ms_tok;
      for (const GqaResult* r : ms) ms_tok.push_back(r->cache[i].ms_per_token);
      std::sort(ms_tok.begin(), ms_tok.end());
      md += fmt::format(" {} | {} | {:.2f} |", ms.front()->cache[i].bytes_used, ms.front()->cache[i].bytes_allocated,
                        ms_tok[ms_tok.size() / 2]);
    }
    md += fmt::format(" {:.1e} ({:.1f}) |\n", diff, scale);
  }
  md += "\nThe multi-head cache (G = H) holds 2·L·B·(t + S)·E floats whatever H is; G K/V heads divide it by H/G. "
        "Timing depends on the machine's load: compare rows of one run, not runs. max abs Δlogit compares each model's "
        "teacher-forced logits with its cached one-token steps (decode_step) on the same targets.\n";
  return md;
}

}  // namespace

double seconds_per_step(const std::string& lang) { return lang == "de" ? 0.14 : 0.06; }

std::pair<double, double> teacher_forced_vs_cached(Seq2SeqTransformer& model, const VectorDataset& data, int64_t n) {
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  const Batch b = first_rows(data, n);
  const int64_t B = b.tgt_in.size(0), T = b.tgt_in.size(1), V = model.config.tgt_vocab;
  const std::vector<float> full = model.forward(b.src, b.tgt_in, b.src_key_padding_mask).to_vector<float>();  // [B, T, V]
  const std::vector<int64_t> gold = b.tgt_out.to_vector<int64_t>();
  const Tensor memory = model.encode(b.src, b.src_key_padding_mask);
  KVCache cache = model.make_cache();
  double diff = 0, scale = 0;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<int64_t> ids = b.tgt_in.narrow(1, t, 1).contiguous().to_vector<int64_t>();
    const Tensor step = model.decode_step(ids, cache, memory, b.src_key_padding_mask);  // [B, V]
    const std::vector<float> inc = step.to_vector<float>();
    for (int64_t i = 0; i < B; ++i) {
      if (gold[static_cast<size_t>(i * T + t)] == kPadId) continue;
      for (int64_t v = 0; v < V; ++v) {
        const double a = full[static_cast<size_t>((i * T + t) * V + v)], c = inc[static_cast<size_t>(i * V + v)];
        diff = std::max(diff, std::abs(a - c));
        scale = std::max(scale, std::abs(a));
      }
    }
  }
  model.train(was_training);
  return {diff, scale};
}

std::string gqa_plan(const StudyOptions& o, const GqaOptions& g, const std::string& lang) {
  const int64_t models = static_cast<int64_t>(g.groups.size()) * g.seeds;
  const int64_t steps = o.steps_for(lang);
  const int64_t uptrain_steps = std::max<int64_t>(1, std::llround(g.uptrain_fraction * static_cast<double>(steps)));
  const int64_t uptrains = static_cast<int64_t>(std::count_if(g.groups.begin(), g.groups.end(),
                                                              [&](int64_t x) { return x != g.heads; })) * g.seeds;
  const double minutes = static_cast<double>(models * steps + uptrains * uptrain_steps) *
                         seconds_per_step(lang) / 60;
  return fmt::format("gqa {}: {} models x {} steps, {} uptrainings x {} steps: about {:.1f} core-minutes of training "
                     "(at {} s/step, the study model at 1 thread)", lang, models, steps, uptrains,
                     uptrain_steps, minutes, seconds_per_step(lang));
}

std::vector<GqaResult> gqa_study(const StudyOptions& o, const GqaOptions& g, const Corpus& corpus) {
  if (std::find(g.groups.begin(), g.groups.end(), g.heads) == g.groups.end())
    fail<ValueError>("gqa", "the groups must include G = H = {} (the multi-head model is the uptraining source)",
                     g.heads);
  for (int64_t G : g.groups)
    if (G < 1 || g.heads % G != 0) fail<ValueError>("gqa", "G = {} does not divide H = {}", G, g.heads);
  const Batch bench = first_rows(corpus.test, g.batch);
  const int64_t steps = o.steps_for(corpus.translator.task.lang);  // what train_run trains
  const int64_t uptrain_steps = std::max<int64_t>(1, std::llround(g.uptrain_fraction * static_cast<double>(steps)));
  std::vector<GqaResult> results;
  std::vector<GqaResult> converted, uptrained;
  for (int64_t seed = 1; seed <= g.seeds; ++seed) {
    const auto useed = static_cast<uint64_t>(seed);
    // From scratch, the multi-head model first: it is the source of the conversions.
    std::unique_ptr<Seq2SeqTransformer> mha;
    std::vector<int64_t> groups = g.groups;
    std::stable_partition(groups.begin(), groups.end(), [&](int64_t G) { return G == g.heads; });
    for (int64_t G : groups) {
      StudyOptions os = o;
      os.model.kv_heads = G;
      std::unique_ptr<Seq2SeqTransformer> model;
      const RunResult run = train_run(os, corpus, g.heads, useed, &model);
      results.push_back(measure(g, corpus, bench, *model, {run.exact_match, run.bleu, run.loss}, "scratch", useed,
                                steps));
      if (G == g.heads) mha = std::move(model);
    }
    // Converted (mean-pooled, Ainslie et al.), scored, then uptrained.
    for (int64_t G : g.groups) {
      if (G == g.heads) continue;
      const GroupedQueryModel gq = to_grouped_query(mha->config, mha->state_dict(), G);
      Generator init(useed);
      auto dropout_gen = std::make_shared<Generator>(mix_seed(useed, 0xd50u));
      Seq2SeqTransformer model(gq.config, init, dropout_gen);
      model.load_state_dict(gq.state);
      converted.push_back(measure(g, corpus, bench, model, evaluate_quality(o, corpus, model), "converted", useed, 0));
      LoaderOptions lo;
      lo.batch_size = o.training.batch_size;
      lo.seed = mix_seed(useed, 0x6a5u);  // another order than the pre-training's first batches
      DataLoader loader(corpus.train, lo);
      const TrainSummary up = train_seq2seq(model, dropout_gen, loader, corpus.test,
                                            quiet_training(o.training, uptrain_steps, useed, o.eval_size),
                                            corpus.translator.hooks());
      uptrained.push_back(measure(g, corpus, bench, model, quality_of(up.last_eval), "uptrained", useed, uptrain_steps));
    }
  }
  results.insert(results.end(), converted.begin(), converted.end());
  results.insert(results.end(), uptrained.begin(), uptrained.end());

  std::string jsonl;
  for (const GqaResult& r : results) {
    nlohmann::json cache = nlohmann::json::array();
    for (const CacheCost& c : r.cache)
      cache.push_back({{"t", c.t}, {"bytes_used", c.bytes_used}, {"bytes_formula", c.bytes_formula},
                       {"bytes_allocated", c.bytes_allocated}, {"ms_per_token", c.ms_per_token}});
    jsonl += nlohmann::json{{"lang", r.lang}, {"how", r.how}, {"heads", r.heads}, {"kv_heads", r.kv_heads},
                            {"seed", r.seed}, {"steps", r.steps}, {"exact_match", r.exact_match}, {"bleu", r.bleu},
                            {"loss", r.loss}, {"cache", cache}, {"max_logit_diff", r.max_logit_diff},
                            {"max_abs_logit", r.max_abs_logit}}
                 .dump() +
             "\n";
  }
  const std::string lang = corpus.translator.task.lang;
  write_file_atomic(o.out_dir + "/gqa-" + lang + ".jsonl", jsonl);
  write_file_atomic(o.out_dir + "/gqa-" + lang + ".md", report(o, g, results, bench.src.size(1), uptrain_steps));
  return results;
}

}  // namespace attograd::app::heads
