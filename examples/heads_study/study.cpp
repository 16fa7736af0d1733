#include "examples/heads_study/study.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <attograd/autograd/io/safetensors.h>
#include <attograd/autograd/engine.h>
#include "examples/common/attention_svg.h"
#include "examples/common/checkpoint_model.h"
#include "examples/heads_study/curves.h"
#include "examples/heads_study/head_stats.h"
#include "examples/heads_study/stats.h"
#include <attograd/nn/generate.h>

namespace attograd::app::heads {

namespace {

void write_text(const std::string& path, const std::string& text) {
  write_file_atomic(path, text);
}

struct MeanStd {
  double mean = 0, std = 0;
};
// Sample standard deviation (n - 1); 0 for a single value.
MeanStd mean_std(const std::vector<double>& v) {
  MeanStd m;
  if (v.empty()) return m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    for (double x : v) m.std += (x - m.mean) * (x - m.mean);
    m.std = std::sqrt(m.std / static_cast<double>(v.size() - 1));
  }
  return m;
}

std::string pm(const MeanStd& m, int digits) { return fmt::format("{:.{}f} ± {:.{}f}", m.mean, digits, m.std, digits); }

}  // namespace

Corpus load_corpus(const std::string& data_dir, const std::string& lang) {
  const TranslationTask task = TranslationTask::for_language(lang);
  const ParallelText train = read_split(data_dir, "train", lang);
  Translator tr = Translator::from_training_text(task, train);
  VectorDataset train_set = tr.encode(train), test_set = tr.encode(read_split(data_dir, "test", lang));
  VectorDataset valid = tr.encode(read_split(data_dir, "valid", lang)), gen = tr.encode(read_split(data_dir, "gen", lang));
  return {std::move(tr), std::move(train_set), std::move(test_set), std::move(valid), std::move(gen)};
}

double flops_per_target_token(const TransformerConfig& c, double S, double T) {
  const double E = static_cast<double>(c.d_model), F = static_cast<double>(c.d_ff), V = static_cast<double>(c.tgt_vocab);
  const double r = static_cast<double>(c.decoder_kv_heads()) / static_cast<double>(c.heads);  // G/H
  const double enc_layer = S * (8 * E * E + 4 * E * F) + 4 * S * S * E;
  const double dec_layer = T * (4 * E * E + 4 * r * E * E + 4 * E * E + 4 * E * F) + 4 * r * S * E * E +
                           4 * T * T * E + 4 * T * S * E;
  const double forward = static_cast<double>(c.enc_layers) * enc_layer + static_cast<double>(c.dec_layers) * dec_layer +
                         2 * T * E * V;
  return 3 * forward / T;
}

RunResult train_run(const StudyOptions& o, const Corpus& corpus, int64_t heads, uint64_t seed,
                    std::unique_ptr<Seq2SeqTransformer>* keep) {
  TransformerConfig cfg = o.model;
  cfg.heads = heads;
  cfg.src_vocab = corpus.translator.src_vocab.size();
  cfg.tgt_vocab = corpus.translator.tgt_vocab.size();
  cfg.validate();
  TrainOptions t = o.training;
  t.steps = o.steps_for(corpus.translator.task.lang);
  if (t.warmup >= t.steps) t.warmup = t.steps / 10;
  t.seed = seed;
  t.eval_every = o.curve_every;  // the learning curve on valid; test and gen are scored after training
  t.quiet = true;
  t.samples = 0;

  Generator init_gen(seed);
  auto dropout_gen = std::make_shared<Generator>(mix_seed(seed, 0xd50u));
  auto model = std::make_unique<Seq2SeqTransformer>(cfg, init_gen, dropout_gen);
  LoaderOptions lo;
  lo.batch_size = t.batch_size;
  lo.seed = seed;
  DataLoader loader(corpus.train, lo);
  RunResult r;
  const RunSummary s = train_with_curve(*model, dropout_gen, loader, corpus, t, o.curve_size, r.curve);
  const EvalResult test = score_split(*model, corpus.translator, corpus.test, o.eval_size);
  const EvalResult gen = score_split(*model, corpus.translator, corpus.gen, o.eval_size);

  double src_tokens = 0, tgt_tokens = 0;
  for (const Example& e : corpus.train.examples()) {
    src_tokens += static_cast<double>(e.src.size() + 1);
    tgt_tokens += static_cast<double>(e.tgt.size() + 1);
  }
  const double n = static_cast<double>(corpus.train.size());

  r.lang = corpus.translator.task.lang;
  r.heads = heads;
  r.head_width = cfg.d_model / heads;
  r.d_model = cfg.d_model;
  r.d_ff = cfg.d_ff;
  r.steps = t.steps;
  r.seed = seed;
  r.exact_match = 100 * test.exact_match;
  r.token_accuracy = 100 * test.token_accuracy;
  r.loss = test.loss;
  r.bleu = bleu_of(test);
  r.gen_exact_match = 100 * gen.exact_match;
  r.gen_bleu = bleu_of(gen);
  r.step_ms = 1e3 * s.step_seconds / static_cast<double>(std::max<int64_t>(s.losses.size(), 1));
  r.parameters = model->num_parameters();
  r.train_flops_per_token = flops_per_target_token(cfg, src_tokens / n, tgt_tokens / n);
  if (keep) *keep = std::move(model);
  return r;
}

void write_grid_report(const StudyOptions& o, const std::vector<RunResult>& runs) {
  std::string jsonl;
  for (const RunResult& r : runs) {
    if (r.d_model != o.model.d_model || r.d_ff != o.model.d_ff) continue;  // the constant-E grid (both axes: axes.jsonl)
    jsonl += nlohmann::json{{"lang", r.lang},          {"heads", r.heads},
                            {"head_width", r.head_width}, {"seed", r.seed},
                            {"exact_match", r.exact_match}, {"token_accuracy", r.token_accuracy},
                            {"bleu", r.bleu},          {"loss", r.loss},
                            {"step_ms", r.step_ms},    {"parameters", r.parameters},
                            {"train_flops_per_token", r.train_flops_per_token}}
                 .dump() +
             "\n";
  }
  write_text(o.out_dir + "/results.jsonl", jsonl);

  std::string md = fmt::format(
      "| lang | H | D = E/H | exact match % | BLEU | test loss | step ms | parameters | train MFLOP/token |\n"
      "|---|---|---|---|---|---|---|---|---|\n");
  // SVG: exact match (left) and step time (right) against H, one line per language.
  std::map<std::string, std::vector<std::pair<int64_t, std::pair<MeanStd, MeanStd>>>> series;
  for (const std::string& lang : o.langs)
    for (int64_t h : o.heads) {
      std::vector<double> em, bleu, loss, ms;
      const RunResult* any = nullptr;
      for (const RunResult& r : runs)
        if (r.lang == lang && r.heads == h && r.d_model == o.model.d_model && r.d_ff == o.model.d_ff) {
          em.push_back(r.exact_match);
          bleu.push_back(r.bleu);
          loss.push_back(r.loss);
          ms.push_back(r.step_ms);
          any = &r;
        }
      if (!any) continue;
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {:.2f} |\n", lang, h, any->head_width,
                        pm(mean_std(em), 1), pm(mean_std(bleu), 1), pm(mean_std(loss), 4), pm(mean_std(ms), 1),
                        any->parameters, any->train_flops_per_token / 1e6);
      series[lang].push_back({h, {mean_std(em), mean_std(ms)}});
    }
  std::vector<std::string> budgets;
  for (const std::string& lang : o.langs) budgets.push_back(fmt::format("{} {}", lang, o.steps_for(lang)));
  md += fmt::format("\nMean ± sample std over {} seed(s) per row; training steps {}, batch {}, d_model {}, "
                    "d_ff {}, {}+{} layers; exact match, BLEU and loss on {} test sentences, greedy decoding.\n",
                    o.seeds, fmt::join(budgets, ", "), o.training.batch_size, o.model.d_model, o.model.d_ff,
                    o.model.enc_layers, o.model.dec_layers, o.eval_size);
  write_text(o.out_dir + "/heads.md", md);

  // A small two-panel SVG plot (log2 H on x).
  const double W = 360, Hh = 240, left = 50, top = 30, pw = 280, ph = 170;
  std::string svg = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' "
                                "font-family='sans-serif' font-size='11'>\n", 2 * W, Hh);
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
  for (int panel = 0; panel < 2; ++panel) {
    double lo = 1e300, hi = -1e300;
    for (auto& [lang, pts] : series)
      for (auto& [h, v] : pts) {
        const MeanStd& m = panel == 0 ? v.first : v.second;
        lo = std::min(lo, m.mean - m.std);
        hi = std::max(hi, m.mean + m.std);
      }
    if (!(hi > lo)) hi = lo + 1;
    const double x0 = panel * W + left;
    auto X = [&](int64_t h) {
      const double a = std::log2(static_cast<double>(o.heads.front())), b = std::log2(static_cast<double>(o.heads.back()));
      return x0 + (b > a ? (std::log2(static_cast<double>(h)) - a) / (b - a) : 0.5) * pw;
    };
    auto Y = [&](double v) { return top + ph - (v - lo) / (hi - lo) * ph; };
    svg += fmt::format("<text x='{}' y='18' font-size='13'>{}</text>\n", x0,
                       panel == 0 ? "test exact match (%) vs heads" : "training step (ms) vs heads");
    svg += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#888'/>\n", x0, top, pw, ph);
    svg += fmt::format("<text x='{}' y='{}'>{:.1f}</text><text x='{}' y='{}'>{:.1f}</text>\n", x0 - 45, top + 10, hi,
                       x0 - 45, top + ph, lo);
    for (int64_t h : o.heads)
      svg += fmt::format("<text x='{}' y='{}' text-anchor='middle'>{}</text>\n", X(h), top + ph + 15, h);
    int ci = 0;
    for (auto& [lang, pts] : series) {
      const char* col = colors[ci++ % 4];
      std::string path;
      for (auto& [h, v] : pts) {
        const MeanStd& m = panel == 0 ? v.first : v.second;
        path += fmt::format("{}{:.1f},{:.1f} ", path.empty() ? "M" : "L", X(h), Y(m.mean));
        svg += fmt::format("<line x1='{0:.1f}' x2='{0:.1f}' y1='{1:.1f}' y2='{2:.1f}' stroke='{3}'/>\n", X(h),
                           Y(m.mean - m.std), Y(m.mean + m.std), col);
      }
      svg += fmt::format("<path d='{}' fill='none' stroke='{}' stroke-width='2'/>\n", path, col);
      svg += fmt::format("<text x='{}' y='{}' fill='{}'>{}</text>\n", x0 + pw - 30, top + 14 * ci, col, lang);
    }
  }
  svg += "</svg>\n";
  write_text(o.out_dir + "/heads.svg", svg);
}

namespace {

// Which source word each target word should align with, per language.
const std::map<std::string, std::vector<std::pair<std::string, std::string>>> kAlignments = {
    {"de", {{"seventy", "siebzig"}, {"one", "ein"}, {"thousand", "tausend"}}},
    {"fr", {{"seventy", "soixante"}, {"thousand", "mille"}}},
    {"es", {{"seventy", "setenta"}, {"thousand", "mil"}}},
};

// The output positions whose tokens spell `word` (one word token, or its characters).
std::vector<int64_t> find_word(const std::vector<std::string>& tokens, const std::string& word) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string joined;
    for (size_t j = i; j < tokens.size() && joined.size() < word.size(); ++j) {
      joined += tokens[j];
      if (joined == word) {
        std::vector<int64_t> span;
        for (size_t k = i; k <= j; ++k) span.push_back(static_cast<int64_t>(k));
        return span;
      }
    }
  }
  return {};
}

}  // namespace

std::string inspect_model(const StudyOptions& o, const Corpus& corpus, Seq2SeqTransformer& model,
                          const std::string& what) {
  const Translator& tr = corpus.translator;
  const std::string lang = tr.task.lang;
  std::string md = fmt::format("## Heads of the en→{} model ({}, H = {})\n\n", lang, what, model.config.heads);

  // Entropy and distance over test batches; ablation over the first sentences.
  HeadStatistics stats;
  std::vector<AblationBatch> batches;
  const int64_t n = std::min<int64_t>(o.ablation_size, corpus.test.size());
  for (int64_t start = 0; start < n; start += 64) {
    std::vector<Example> ex;
    for (int64_t i = start; i < std::min(n, start + 64); ++i) ex.push_back(corpus.test.get(i));
    const Batch b = collate(ex);
    stats.add_batch(model, b.src, b.tgt_in, b.src_key_padding_mask, b.tgt_key_padding_mask);
    batches.push_back({b.src, b.tgt_in, b.tgt_out, b.src_key_padding_mask});
  }
  double baseline = 0;
  const std::vector<HeadAblation> ablation = ablate_heads(model, batches, kPadId, &baseline);
  const std::vector<HeadStat> st = stats.results();
  md += fmt::format("Baseline test loss {:.4f} on {} sentences. Entropy in nats (ceiling: uniform over the visible "
                    "keys); distance in positions |t − s|; ablation: loss with the head's output zeroed.\n\n",
                    baseline, n);
  md += "| module | head | entropy | uniform | mean distance | peak weight | loss without it | Δ loss |\n"
        "|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < st.size(); ++i)
    md += fmt::format("| {} | {} | {:.3f} | {:.3f} | {:.2f} | {:.3f} | {:.4f} | {:+.4f} |\n", st[i].module, st[i].head,
                      st[i].entropy, st[i].uniform_entropy, st[i].mean_distance, st[i].max_weight, ablation[i].loss,
                      ablation[i].delta);
  std::vector<HeadAblation> sorted = ablation;
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.delta < b.delta; });
  md += "\nCheapest heads to remove: ";
  for (size_t i = 0; i < std::min<size_t>(3, sorted.size()); ++i)
    md += fmt::format("{}{} head {} ({:+.4f})", i ? ", " : "", sorted[i].module, sorted[i].head, sorted[i].delta);
  md += fmt::format(". Most costly: {} head {} ({:+.4f}).\n\n", sorted.back().module, sorted.back().head,
                    sorted.back().delta);

  // Pictures and alignment for the chosen inputs.
  const std::string dir = o.out_dir + "/inspect-" + lang;
  for (size_t k = 0; k < o.picture_inputs.size(); ++k) {
    const std::string& text = o.picture_inputs[k];
    std::vector<std::string> words = tr.src_tok->split(text);
    std::vector<int64_t> ids = tr.src_vocab.encode(words);
    words.push_back("<eos>");
    ids.push_back(kEosId);
    const Tensor src = Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())});
    DecodeOptions d;
    d.max_len = model.config.max_len - 1;
    const std::vector<int64_t> out = greedy_decode(model, src, Tensor(), d)[0].tokens;
    const std::string translation = tr.show_target(out);
    const AttentionPictures pics = draw_attention(model, words, src, out, tr.tgt_vocab);
    const std::string sub = fmt::format("{}/input-{}", dir, k + 1);
    write_attention_pictures(pics, sub, text, translation);
    md += fmt::format("**\"{}\" → \"{}\"**: pictures in `inspect-{}/input-{}/index.html`.\n\n", text, translation, lang,
                      k + 1);
    // Alignment: the weight each cross-attention head puts on the source word
    // while the decoder emits its translation (rows predicting the word's tokens).
    const auto align = kAlignments.find(lang);
    if (align == kAlignments.end()) continue;
    const std::vector<std::string> out_tokens = tr.tgt_vocab.decode(out);
    for (const auto& [src_word, tgt_word] : align->second) {
      const auto col = std::find(words.begin(), words.end(), src_word);
      const std::vector<int64_t> rows = find_word(out_tokens, tgt_word);
      if (col == words.end() || rows.empty()) continue;
      const int64_t c = col - words.begin();
      const AttentionMap* best = nullptr;
      double best_w = -1, uniform = 1.0 / static_cast<double>(words.size());
      for (const AttentionMap& m : pics.maps) {
        if (m.kind != "cross") continue;
        double w = 0;
        for (int64_t r : rows) w += m.weights[static_cast<size_t>(r) * m.cols.size() + static_cast<size_t>(c)];
        w /= static_cast<double>(rows.size());
        if (w > best_w) { best_w = w; best = &m; }
      }
      if (best)
        md += fmt::format("- `{}` → `{}`: cross-attention layer {} head {} puts {:.0f}% of its weight on `{}` while "
                          "emitting `{}` (uniform would be {:.0f}%).\n",
                          src_word, tgt_word, best->layer, best->head, 100 * best_w, src_word, tgt_word, 100 * uniform);
    }
    md += "\n";
  }
  write_text(o.out_dir + "/inspect-" + lang + ".md", md);
  return md;
}

std::vector<AblationBatch> first_batches(const VectorDataset& data, int64_t n, int64_t batch_size) {
  std::vector<AblationBatch> batches;
  n = std::min<int64_t>(n, data.size());
  for (int64_t start = 0; start < n; start += batch_size) {
    std::vector<Example> ex;
    for (int64_t i = start; i < std::min(n, start + batch_size); ++i) ex.push_back(data.get(i));
    const Batch b = collate(ex);
    batches.push_back({b.src, b.tgt_in, b.tgt_out, b.src_key_padding_mask});
  }
  return batches;
}

namespace {

// The next `count` kept heads in `ranking` (lowest first) are removed from the mask.
void remove_next(HeadMask& mask, const std::vector<std::pair<std::string, int64_t>>& ranking, int64_t count) {
  for (const auto& [module, head] : ranking) {
    if (count == 0) return;
    double& keep = mask.at(module)[static_cast<size_t>(head)];
    if (keep != 0.0) {
      keep = 0.0;
      --count;
    }
  }
}

}  // namespace

PruningRun pruning_curves(const StudyOptions& o, const Corpus& corpus, Seq2SeqTransformer& model, uint64_t seed) {
  const Translator& tr = corpus.translator;
  const std::vector<AblationBatch> batches = first_batches(corpus.train, o.ablation_size);
  // Importance as Michel et al. define it, E_x |∂L(x)/∂ξ_h| over single sentences: a batch's gradient sums
  // the sentences' signed gradients before the absolute value, which cancels (roles-<lang>.md measures how much).
  const std::vector<AblationBatch> sentences = first_batches(corpus.train, o.ablation_size, 1);
  const HeadMask full = full_head_mask(model);
  int64_t total = 0;
  for (const auto& [name, keep] : full) total += static_cast<int64_t>(keep.size());
  const int64_t step = std::max<int64_t>(1, (total + 5) / 10);  // 10% of the heads, rounded
  const int64_t most = total * 9 / 10;

  EvalOptions eo;
  eo.max_examples = o.eval_size;
  eo.use_decode_step = false;  // the head mask is an attention observer, which only the graph calls
  const TaskHooks hooks = tr.hooks();
  auto score = [&](const std::string& order, const HeadMask& mask) {
    HeadMaskGuard guard(model, mask);
    EvalResult e = evaluate(model, corpus.test, eo);
    if (hooks.add_metrics) hooks.add_metrics(e);
    PruningPoint p{order, removed_heads(mask), 0, 100 * e.exact_match, 0};
    p.fraction = static_cast<double>(p.removed) / static_cast<double>(total);
    for (const auto& [k, v] : e.extra)
      if (k == "bleu") p.bleu = v;
    return p;
  };

  // Fixed rankings: ablation Δ on the full model (smallest first), and a seeded shuffle.
  double baseline = 0;
  std::vector<HeadAblation> ablation = ablate_heads(model, batches, kPadId, &baseline);
  std::stable_sort(ablation.begin(), ablation.end(), [](auto& a, auto& b) { return a.delta < b.delta; });
  std::vector<std::pair<std::string, int64_t>> by_ablation, shuffled;
  for (const HeadAblation& a : ablation) by_ablation.emplace_back(a.module, a.head);
  for (const auto& [name, keep] : full)
    for (size_t h = 0; h < keep.size(); ++h) shuffled.emplace_back(name, static_cast<int64_t>(h));
  Generator gen(seed);  // Fisher-Yates with the project's generator: the same order on every platform
  for (size_t i = shuffled.size(); i > 1; --i) std::swap(shuffled[i - 1], shuffled[gen.randint(i)]);

  std::vector<PruningPoint> points;
  const PruningPoint intact = score("none", full);
  for (const std::string order : {"importance", "ablation", "random"}) {
    HeadMask mask = full;
    points.push_back(intact);
    points.back().order = order;
    while (removed_heads(mask) + step <= most) {
      if (order == "importance") {
        std::vector<HeadImportance> imp = head_importance(model, sentences, kPadId, mask);
        std::stable_sort(imp.begin(), imp.end(), [](auto& a, auto& b) { return a.normalized < b.normalized; });
        std::vector<std::pair<std::string, int64_t>> ranking;
        for (const HeadImportance& h : imp) ranking.emplace_back(h.module, h.head);
        remove_next(mask, ranking, step);
      } else {
        remove_next(mask, order == "ablation" ? by_ablation : shuffled, step);
      }
      points.push_back(score(order, mask));
    }
  }

  PruningRun run;
  run.seed = seed;
  run.total_heads = total;
  run.modules = static_cast<int64_t>(full.size());
  run.step = step;
  run.baseline_loss = baseline;
  run.points = std::move(points);
  return run;
}

void write_pruning_report(const StudyOptions& o, const Corpus& corpus, int64_t heads,
                          const std::vector<PruningRun>& runs) {
  if (runs.empty()) fail<ValueError>("write_pruning_report", "no pruning runs; hint: prune at least one model");
  const PruningRun& first = runs.front();
  for (const PruningRun& r : runs)
    if (r.points.size() != first.points.size() || r.total_heads != first.total_heads)
      fail<ValueError>("write_pruning_report", "seed {} has {} points over {} heads, seed {} {} over {}; hint: prune "
                       "models of one shape", r.seed, r.points.size(), r.total_heads, first.seed, first.points.size(),
                       first.total_heads);
  // One cell: the mean over the models of one point's metric, with its interval when there are several.
  auto cell = [&](size_t i, double PruningPoint::*metric) {
    std::vector<double> v;
    for (const PruningRun& r : runs) v.push_back(r.points[i].*metric);
    return v.size() == 1 ? fmt::format("{:.1f}", v.front()) : show_interval(bootstrap_mean(v, 19), 1);
  };
  std::vector<std::string> seeds, baselines;
  for (const PruningRun& r : runs) {
    seeds.push_back(std::to_string(r.seed));
    baselines.push_back(fmt::format("{:.4f}", r.baseline_loss));
  }
  const std::string lang = corpus.translator.task.lang;
  std::string md = fmt::format(
      "## Pruning the en→{} models (H = {}, {} heads in {} attention modules; seeds {})\n\n"
      "Heads removed {} at a time; exact match (%) and BLEU by greedy decoding of {} test sentences; importance and "
      "ablation measured on {} training sentences (importance: the mean |∂L/∂ξ| of single sentences, recomputed "
      "after each removal; ablation: Δ loss of each head removed alone from the full model; baseline loss {}). "
      "{}\n\n"
      "| removed | fraction | importance EM | BLEU | ablation EM | BLEU | random EM | BLEU |\n"
      "|---|---|---|---|---|---|---|---|\n",
      lang, heads, first.total_heads, first.modules, fmt::join(seeds, ", "), first.step,
      std::min(o.eval_size, corpus.test.size()), std::min(o.ablation_size, corpus.train.size()),
      fmt::join(baselines, ", "),
      runs.size() == 1 ? std::string("One model: no interval.")
                       : fmt::format("Mean over the {} models and its 95% percentile-bootstrap interval over seeds "
                                     "(each model prunes in its own random order, Generator(seed)).", runs.size()));
  const size_t levels = first.points.size() / 3;
  for (size_t i = 0; i < levels; ++i) {
    const PruningPoint& a = first.points[i];
    md += fmt::format("| {} | {:.0f}% | {} | {} | {} | {} | {} | {} |\n", a.removed, 100 * a.fraction,
                      cell(i, &PruningPoint::exact_match), cell(i, &PruningPoint::bleu),
                      cell(levels + i, &PruningPoint::exact_match), cell(levels + i, &PruningPoint::bleu),
                      cell(2 * levels + i, &PruningPoint::exact_match), cell(2 * levels + i, &PruningPoint::bleu));
  }
  std::string jsonl;
  for (const PruningRun& r : runs)
    for (const PruningPoint& p : r.points)
      jsonl += nlohmann::json{{"lang", lang}, {"seed", r.seed}, {"order", p.order}, {"removed", p.removed},
                              {"fraction", p.fraction}, {"exact_match", p.exact_match}, {"bleu", p.bleu}}
                   .dump() +
               "\n";
  write_text(o.out_dir + "/pruning-" + lang + ".md", md);
  write_text(o.out_dir + "/pruning-" + lang + ".jsonl", jsonl);
}

namespace {

// kv_bench's rows for one K/V head count G: an untrained model with H =
// o.inspect_heads query heads and G K/V heads in the decoder.
std::string kv_bench_rows(const StudyOptions& o, const Corpus& corpus, const Batch& b, int64_t G) {
  using clock = std::chrono::steady_clock;
  TransformerConfig cfg = o.model;
  cfg.heads = o.inspect_heads;
  cfg.kv_heads = G;
  cfg.src_vocab = corpus.translator.src_vocab.size();
  cfg.tgt_vocab = corpus.translator.tgt_vocab.size();
  cfg.max_len = *std::max_element(o.kv_lengths.begin(), o.kv_lengths.end()) + 2;
  cfg.validate();
  Generator gen(7);
  Seq2SeqTransformer model(cfg, gen, nullptr);  // timing and equality do not depend on training
  model.eval();
  const int64_t B = b.src.size(0), S = b.src.size(1), D = cfg.d_model / cfg.heads, L = cfg.dec_layers;
  std::string md;
  for (int64_t len : o.kv_lengths) {
    DecodeOptions d;
    d.max_len = len;
    d.eos_id = -1;
    double ms[2];
    std::vector<Hypothesis> outs[2];
    for (int cached = 0; cached < 2; ++cached) {
      d.use_cache = cached == 0;
      std::vector<double> times;
      for (int64_t rep = 0; rep < o.kv_repeats; ++rep) {
        const auto t0 = clock::now();
        outs[cached] = greedy_decode(model, b.src, b.src_key_padding_mask, d);
        times.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count() / static_cast<double>(len));
      }
      std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
      ms[cached] = times[times.size() / 2];
    }
    bool same = true;
    for (int64_t i = 0; i < B; ++i) same = same && outs[0][static_cast<size_t>(i)].tokens == outs[1][static_cast<size_t>(i)].tokens;
    // The cache after `len` steps, filled the same way greedy_decode fills it.
    KVCache cache = model.make_cache();
    {
      NoGradGuard no_grad;
      const Tensor memory = model.encode(b.src, b.src_key_padding_mask);
      Tensor tok = Tensor::full({B, 1}, static_cast<double>(kBosId), DType::i64);
      for (int64_t t = 0; t < len; ++t) model.decode(tok, memory, b.src_key_padding_mask, Tensor(), &cache);
    }
    // Per decoder layer: self K, V [B, G, t, D] and cross K, V [B, G, S, D], float32.
    const size_t formula = static_cast<size_t>(2 * L * B * (len + S) * G * D * 4);
    md += fmt::format("| {} | {} | {:.2f} | {:.2f} | {:.1f}x | {} | {} | {} | {} |\n", G, len, ms[0], ms[1],
                      ms[1] / ms[0], same ? "yes" : "NO", cache.bytes_used(), formula, cache.bytes_allocated());
    if (!same) fail<Error>("kv-bench", "decoding with and without the KV cache gave different outputs at length {}", len);
    if (cache.bytes_used() != formula)
      fail<Error>("kv-bench", "the cache holds {} bytes, the formula says {}", cache.bytes_used(), formula);
  }
  return md;
}

}  // namespace

std::string kv_bench(const StudyOptions& o, const Corpus& corpus) {
  std::vector<Example> ex;
  for (int64_t i = 0; i < std::min<int64_t>(o.kv_batch, corpus.test.size()); ++i) ex.push_back(corpus.test.get(i));
  const Batch b = collate(ex);
  const int64_t B = b.src.size(0), S = b.src.size(1), L = o.model.dec_layers;
  std::string md = fmt::format(
      "Greedy decoding of {} test sources (S = {} with padding) to a fixed length (EOS ignored), decoder {} layers, "
      "E = {}, H = {}, G K/V heads of the decoder's attention, float32; median of {} runs. The model is untrained "
      "(random weights): timing and cache size do not depend on training.\n\n"
      "| G | length | ms/step with cache | ms/step without | speedup | outputs identical | cache bytes used | formula "
      "| bytes allocated |\n"
      "|---|---|---|---|---|---|---|---|---|\n",
      B, S, L, o.model.d_model, o.inspect_heads, o.kv_repeats);
  for (int64_t G : o.kv_groups) md += kv_bench_rows(o, corpus, b, G);
  md += fmt::format("\nThe cache keeps, per decoder layer, the self-attention keys and values of every step so far, "
                    "K and V [B, G, t, D], and the cross-attention keys and values projected once from the encoder "
                    "memory, K and V [B, G, S, D]: 2·L·B·(t + S)·G·D floats in all. With multi-head attention (G = H, "
                    "H·D = E) that is 2·L·B·(t + S)·E whatever H is; grouped-query attention divides it by H/G. Bytes "
                    "allocated add the spare capacity: each buffer starts at 16 rows and doubles when full, so at a "
                    "power-of-two t the self-attention buffers are exactly full (the excess is the cross-attention's "
                    "16 − S rows) and one step later they hold twice what they use. Without the cache each step re-runs the decoder over the whole prefix, so a step "
                    "costs O(t) more and the total grows as O(t²).\n");
  write_text(o.out_dir + "/kv-bench.md", md);
  return md;
}

std::string convert_to_grouped_query(const std::string& checkpoint, int64_t kv_heads, const std::string& out) {
  if (!out.ends_with(".model.safetensors"))
    fail<ValueError>("convert-gqa", "--to {} must name a *.model.safetensors file (what translate and heads_study "
                     "load as a checkpoint); hint: --to {}.model.safetensors", out, out);
  const Checkpoint c = load_checkpoint(checkpoint, /*need_train_state=*/false, CheckpointReader{"heads_study", "translate"});
  // Built as every program loads a checkpoint: its weights checked against its config first.
  const std::unique_ptr<Seq2SeqTransformer> model = seq2seq_from_checkpoint(c);
  const TransformerConfig& from = model->config;
  if (kv_heads <= 0 || from.heads % kv_heads != 0)
    fail<ValueError>("convert-gqa", "--kv-heads {} must divide the model's heads {}", kv_heads, from.heads);
  GroupedQueryModel g = to_grouped_query(from, model->state_dict(), kv_heads);
  Metadata metadata = load_safetensors_metadata(c.model_path);
  metadata["config"] = g.config.to_json().dump();
  metadata["program"] = "heads_study";
  metadata.erase("run");  // a new model, of no training run
  save_model_file(out, g.state, metadata);
  return fmt::format("{}: H = {}, decoder K/V heads {} -> {} (k_proj, v_proj mean-pooled per group); KV cache {}x "
                     "smaller; wrote {}", c.model_path, from.heads, from.decoder_kv_heads(), kv_heads,
                     from.decoder_kv_heads() / kv_heads, out);
}

}  // namespace attograd::app::heads
