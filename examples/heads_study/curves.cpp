#include "examples/heads_study/curves.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/io/safetensors.h>
#include "examples/heads_study/stats.h"

namespace attograd::app::heads {

namespace {

constexpr uint64_t kBootstrapSeed = 19;  // issue 19; every interval resamples from this seed

VectorDataset first_n(const VectorDataset& data, int64_t n) {
  const auto& all = data.examples();
  return VectorDataset(std::vector<Example>(all.begin(), all.begin() + std::min<int64_t>(n, data.size())));
}

// The seq2seq task, with its evaluations replaced by a learning-curve point on
// the valid sentences (teacher forcing only: no decoding, so a point is cheap).
class CurveTask : public TrainTask {
 public:
  CurveTask(TrainTask& inner, Seq2SeqTransformer& model, const VectorDataset& valid, std::vector<CurveSample>& curve)
      : inner_(inner), model_(model), valid_(valid), curve_(curve) {}

  Module& model() override { return inner_.model(); }
  int64_t model_width() const override { return inner_.model_width(); }
  int64_t batch_size() const override { return inner_.batch_size(); }
  CheckpointMeta checkpoint_meta() const override { return inner_.checkpoint_meta(); }
  nlohmann::json reparsed_config(const nlohmann::json& saved) const override { return inner_.reparsed_config(saved); }
  Generator& dropout_generator() override { return inner_.dropout_generator(); }
  ShardLoss next_loss(double label_smoothing) override {
    ++steps_;
    return inner_.next_loss(label_smoothing);
  }
  TaskEval evaluate(int64_t) override {
    const CurveSample p = measure();
    return {p.loss, fmt::format("valid loss {:.4f}  token accuracy {:.2f}%", p.loss, p.token_accuracy),
            {{"valid_loss", p.loss}, {"valid_token_accuracy", p.token_accuracy}}};
  }
  void save_data_position(TrainProgress& p) const override { inner_.save_data_position(p); }
  std::optional<std::string> restore_data_position(const TrainProgress& p) override {
    return inner_.restore_data_position(p);
  }

  CurveSample measure() {
    EvalOptions eo;
    eo.decode = false;
    eo.max_examples = valid_.size();
    const EvalResult e = app::evaluate(model_, valid_, eo);
    curve_.push_back({steps_, e.loss, 100 * e.token_accuracy});
    return curve_.back();
  }

 private:
  TrainTask& inner_;
  Seq2SeqTransformer& model_;
  const VectorDataset& valid_;
  std::vector<CurveSample>& curve_;
  int64_t steps_ = 0;
};

std::string interval(const std::vector<double>& x, int digits) {
  return show_interval(bootstrap_mean(x, kBootstrapSeed), digits);
}

bool same_shape(const RunResult& r, const GridConfig& c) {
  return r.lang == c.lang && r.heads == c.heads && r.d_model == c.d_model && r.d_ff == c.d_ff;
}

// The runs of one shape, by seed.
std::vector<const RunResult*> runs_of(const std::vector<RunResult>& runs, const GridConfig& c) {
  std::vector<const RunResult*> out;
  for (const RunResult& r : runs)
    if (same_shape(r, c)) out.push_back(&r);
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->seed < b->seed; });
  return out;
}

std::vector<double> values(const std::vector<const RunResult*>& rs, const std::function<double(const RunResult&)>& f) {
  std::vector<double> v;
  for (const RunResult* r : rs) v.push_back(f(*r));
  return v;
}

std::vector<CurvePoint> accuracy_curve(const RunResult& r) {
  std::vector<CurvePoint> c;
  for (const CurveSample& s : r.curve) c.push_back({s.step, s.token_accuracy});
  return c;
}

// The valid token accuracy at the last curve point within `budget` steps.
double accuracy_at(const RunResult& r, int64_t budget) {
  double v = 0;
  for (const CurveSample& s : r.curve)
    if (s.step <= budget) v = s.token_accuracy;
  return v;
}

// "steps to reach target% valid token accuracy" over seeds: an interval when
// every seed reached it, else how many did within the budget.
std::string steps_cell(const std::vector<const RunResult*>& rs, double target) {
  std::vector<double> reached;
  for (const RunResult* r : rs)
    if (const auto s = steps_to_reach(accuracy_curve(*r), target)) reached.push_back(static_cast<double>(*s));
  if (reached.size() == rs.size()) return interval(reached, 0);
  if (reached.empty()) return fmt::format("not reached (0 of {})", rs.size());
  return fmt::format("{} of {} reached", reached.size(), rs.size());
}

// The shapes of one language on one axis, by H.
std::vector<GridConfig> axis_of(const std::vector<GridConfig>& grid, const std::string& lang, bool constant_d) {
  std::vector<GridConfig> out;
  for (const GridConfig& c : grid)
    if (c.lang == lang && (constant_d ? c.constant_d : c.constant_e)) out.push_back(c);
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.heads < b.heads; });
  return out;
}

// Paired differences b − a by seed (the seeds both have).
std::vector<double> paired(const std::vector<const RunResult*>& a, const std::vector<const RunResult*>& b,
                           const std::function<double(const RunResult&)>& f) {
  std::vector<double> x, y;
  for (const RunResult* ra : a)
    for (const RunResult* rb : b)
      if (ra->seed == rb->seed) {
        x.push_back(f(*ra));
        y.push_back(f(*rb));
      }
  return paired_differences(x, y);
}

// "+1.2 [0.3, 2.0]", starred when the interval excludes 0.
std::string difference_cell(const std::vector<double>& d, int digits) {
  if (d.empty()) return "no pairs";
  const Interval i = bootstrap_mean(d, kBootstrapSeed);
  return fmt::format("{:+.{}f} [{:+.{}f}, {:+.{}f}]{}", i.mean, digits, i.lo, digits, i.hi, digits,
                     i.contains(0) ? "" : " *");
}

nlohmann::json run_json(const RunResult& r) {
  nlohmann::json steps = nlohmann::json::array(), loss = nlohmann::json::array(), acc = nlohmann::json::array();
  for (const CurveSample& s : r.curve) {
    steps.push_back(s.step);
    loss.push_back(s.loss);
    acc.push_back(s.token_accuracy);
  }
  return {{"lang", r.lang}, {"heads", r.heads}, {"head_width", r.head_width}, {"d_model", r.d_model},
          {"d_ff", r.d_ff}, {"seed", r.seed}, {"steps", r.steps}, {"exact_match", r.exact_match},
          {"token_accuracy", r.token_accuracy}, {"bleu", r.bleu}, {"loss", r.loss},
          {"gen_exact_match", r.gen_exact_match}, {"gen_bleu", r.gen_bleu}, {"step_ms", r.step_ms},
          {"parameters", r.parameters}, {"train_flops_per_token", r.train_flops_per_token},
          {"curve", {{"step", steps}, {"valid_loss", loss}, {"valid_token_accuracy", acc}}}};
}

RunResult run_from_json(const nlohmann::json& j) {
  RunResult r;
  r.lang = j.at("lang");
  r.heads = j.at("heads");
  r.head_width = j.at("head_width");
  r.d_model = j.at("d_model");
  r.d_ff = j.at("d_ff");
  r.seed = j.at("seed");
  r.steps = j.at("steps");
  r.exact_match = j.at("exact_match");
  r.token_accuracy = j.at("token_accuracy");
  r.bleu = j.at("bleu");
  r.loss = j.at("loss");
  r.gen_exact_match = j.at("gen_exact_match");
  r.gen_bleu = j.at("gen_bleu");
  r.step_ms = j.at("step_ms");
  r.parameters = j.at("parameters");
  r.train_flops_per_token = j.at("train_flops_per_token");
  const nlohmann::json& c = j.at("curve");
  for (size_t i = 0; i < c.at("step").size(); ++i)
    r.curve.push_back({c["step"][i], c.at("valid_loss")[i], c.at("valid_token_accuracy")[i]});
  return r;
}

// What decides a run's result besides its shape and seed.
nlohmann::json run_options(const StudyOptions& o, const std::string& lang) {
  const TrainOptions& t = o.training;
  return {{"steps", o.steps_for(lang)}, {"batch_size", t.batch_size}, {"lr", t.lr}, {"schedule", t.schedule},
          {"warmup", t.warmup}, {"weight_decay", t.weight_decay}, {"clip", t.clip}, {"optimizer", t.optimizer},
          {"enc_layers", o.model.enc_layers}, {"dec_layers", o.model.dec_layers}, {"dropout", o.model.dropout},
          {"max_len", o.model.max_len}, {"curve_every", o.curve_every}, {"curve_size", o.curve_size},
          {"eval_size", o.eval_size}, {"data_dir", o.data_dir}};
}

std::string run_path(const StudyOptions& o, const std::string& lang, int64_t heads, int64_t d_model, int64_t d_ff,
                     uint64_t seed) {
  return fmt::format("{}/runs/{}-H{}-E{}-F{}-seed{}.json", o.out_dir, lang, heads, d_model, d_ff, seed);
}

const StepTiming* timing_of(const std::vector<StepTiming>& timing, const GridConfig& c) {
  for (const StepTiming& t : timing)
    if (t.config.lang == c.lang && t.config.heads == c.heads && t.config.d_model == c.d_model &&
        t.config.d_ff == c.d_ff)
      return &t;
  return nullptr;
}

// Experiment 1 for one language (constant-E axis).
std::string curves_markdown(const StudyOptions& o, const std::vector<GridConfig>& axis,
                            const std::vector<RunResult>& runs, const std::string& lang) {
  std::string md = fmt::format(
      "## Learning curves and final quality, en→{} (constant E = {}, {} steps)\n\n"
      "Mean and 95% percentile-bootstrap interval over seeds (n per row). Exact match, BLEU, token accuracy and "
      "loss on {} test sentences (greedy decoding); steps to a target: the first curve point (every {} steps, "
      "teacher-forced on {} valid sentences) at or above it.\n\n"
      "| H | D | n | exact match % | BLEU | token accuracy % | test loss | steps to 90% | steps to 99% |\n"
      "|---|---|---|---|---|---|---|---|---|\n",
      lang, o.model.d_model, o.steps_for(lang), o.eval_size, o.curve_every, o.curve_size);
  for (const GridConfig& c : axis) {
    const auto rs = runs_of(runs, c);
    if (rs.empty()) continue;
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", c.heads, c.d_model / c.heads, rs.size(),
                      interval(values(rs, [](auto& r) { return r.exact_match; }), 1),
                      interval(values(rs, [](auto& r) { return r.bleu; }), 1),
                      interval(values(rs, [](auto& r) { return r.token_accuracy; }), 2),
                      interval(values(rs, [](auto& r) { return r.loss; }), 4), steps_cell(rs, 90), steps_cell(rs, 99));
  }
  md += "\n### Paired differences between neighbouring H\n\n"
        "Same seed = same data order and the same initialisation stream. Mean difference (larger H minus smaller) "
        "and its 95% bootstrap interval over the pairs; * marks an interval that excludes 0. With few pairs a "
        "percentile bootstrap is narrow (it only sees their spread; with 2 it is their range): read * as a hint, "
        "not a test.\n\n"
        "| from H | to H | pairs | Δ exact match | Δ token accuracy | Δ test loss | Δ valid token accuracy at 1/4 "
        "budget |\n|---|---|---|---|---|---|---|\n";
  const int64_t quarter = o.steps_for(lang) / 4;
  for (size_t i = 1; i < axis.size(); ++i) {
    const auto a = runs_of(runs, axis[i - 1]), b = runs_of(runs, axis[i]);
    const auto pairs = paired(a, b, [](auto& r) { return r.exact_match; });
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", axis[i - 1].heads, axis[i].heads, pairs.size(),
                      difference_cell(pairs, 1),
                      difference_cell(paired(a, b, [](auto& r) { return r.token_accuracy; }), 2),
                      difference_cell(paired(a, b, [](auto& r) { return r.loss; }), 4),
                      difference_cell(paired(a, b, [&](auto& r) { return accuracy_at(r, quarter); }), 2));
  }
  return md;
}

// The smallest H whose mean is within the best mean's interval.
std::string critical_row(const std::vector<GridConfig>& axis, const std::vector<RunResult>& runs,
                         const std::string& what, const std::function<double(const RunResult&)>& f) {
  std::optional<Interval> best;
  int64_t best_h = 0;
  std::vector<std::pair<int64_t, double>> means;
  for (const GridConfig& c : axis) {
    const auto rs = runs_of(runs, c);
    if (rs.empty()) continue;
    const Interval i = bootstrap_mean(values(rs, f), kBootstrapSeed);
    means.emplace_back(c.heads, i.mean);
    if (!best || i.mean > best->mean) {
      best = i;
      best_h = c.heads;
    }
  }
  if (!best) return "";
  int64_t critical = best_h;
  for (const auto& [h, m] : means)
    if (m >= best->lo) {
      critical = h;
      break;
    }
  return fmt::format("| {} | {} ({}) | {} |\n", what, best_h, show_interval(*best, 2), critical);
}

// Experiment 2: both axes of one language.
std::string axes_markdown(const StudyOptions& o, const std::vector<GridConfig>& grid, const std::vector<RunResult>& runs,
                          const std::vector<StepTiming>& timing, const std::string& lang) {
  std::string md = fmt::format("## Both axes of H, en→{}\n\n"
                               "| axis | H | D | E | F | n | parameters | train MFLOP/token | step ms | valid token "
                               "accuracy % at the end | test exact match % | test loss |\n"
                               "|---|---|---|---|---|---|---|---|---|---|---|---|\n",
                               lang);
  for (const bool constant_d : {false, true})
    for (const GridConfig& c : axis_of(grid, lang, constant_d)) {
      const auto rs = runs_of(runs, c);
      if (rs.empty()) continue;
      const StepTiming* t = timing_of(timing, c);
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.3f} | {} | {} | {} | {} |\n",
                        constant_d ? "D" : "E", c.heads, c.d_model / c.heads, c.d_model, c.d_ff, rs.size(),
                        rs.front()->parameters, rs.front()->train_flops_per_token / 1e6,
                        t ? fmt::format("{:.1f}", t->median_ms) : "-",
                        interval(values(rs, [](auto& r) { return r.curve.empty() ? 0 : r.curve.back().token_accuracy; }), 2),
                        interval(values(rs, [](auto& r) { return r.exact_match; }), 1),
                        interval(values(rs, [](auto& r) { return r.loss; }), 4));
    }
  md += fmt::format(
      "\nStep ms: median over {} rounds of {} training steps at 1 thread, the shapes visited in a rotated order each "
      "round (interleaved, so load drift spreads over all shapes). Both axes share the shape whose E and D are on "
      "both.\n\n"
      "**Critical H** per budget: the smallest H whose mean valid token accuracy (teacher-forced, {} valid "
      "sentences) is inside the 95% interval of the best H's mean at that budget.\n\n"
      "| axis | budget | best H (mean [95% CI]) | critical H |\n|---|---|---|---|\n",
      o.timing_rounds, o.timing_steps, o.curve_size);
  const int64_t steps = o.steps_for(lang);
  for (const bool constant_d : {false, true}) {
    const auto axis = axis_of(grid, lang, constant_d);
    for (const int64_t budget : {steps / 4, steps / 2, steps})
      md += critical_row(axis, runs, fmt::format("{} | {} steps", constant_d ? "D" : "E", budget),
                         [budget](const RunResult& r) { return accuracy_at(r, budget); });
    md += critical_row(axis, runs, fmt::format("{} | {} steps, test exact match", constant_d ? "D" : "E", steps),
                       [](const RunResult& r) { return r.exact_match; });
  }
  return md;
}

// Experiment 3: gen against test per shape.
std::string composition_markdown(const StudyOptions& o, const std::vector<GridConfig>& grid,
                                 const std::vector<RunResult>& runs) {
  std::string md = fmt::format(
      "## The composition split against H\n\n"
      "gen.tsv holds numbers whose thousands group never occurs in training. Exact match and BLEU by greedy decoding "
      "of {} sentences of each split; gen − test is paired per run (same model). Mean [95% bootstrap CI] over seeds.\n\n"
      "| lang | axis | H | D | E | n | test exact match % | gen exact match % | gen − test | gen BLEU |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n",
      o.eval_size);
  for (const GridConfig& c : grid) {
    const auto rs = runs_of(runs, c);
    if (rs.empty()) continue;
    std::vector<double> gap;
    for (const RunResult* r : rs) gap.push_back(r->gen_exact_match - r->exact_match);
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", c.lang,
                      c.constant_e && c.constant_d ? "E, D" : c.constant_d ? "D" : "E", c.heads, c.d_model / c.heads,
                      c.d_model, rs.size(), interval(values(rs, [](auto& r) { return r.exact_match; }), 1),
                      interval(values(rs, [](auto& r) { return r.gen_exact_match; }), 1), difference_cell(gap, 1),
                      interval(values(rs, [](auto& r) { return r.gen_bleu; }), 1));
  }
  return md;
}

}  // namespace

RunSummary train_with_curve(Seq2SeqTransformer& model, std::shared_ptr<Generator> dropout_gen, DataLoader& train,
                            const Corpus& corpus, const TrainOptions& opt, int64_t curve_size,
                            std::vector<CurveSample>& curve) {
  const TaskHooks hooks = corpus.translator.hooks();
  const VectorDataset valid = first_n(corpus.valid, curve_size);
  const std::unique_ptr<TrainTask> inner = seq2seq_task(model, std::move(dropout_gen), train, valid, hooks);
  CurveTask task(*inner, model, valid, curve);
  task.measure();  // step 0: the untrained model
  return app::train(task, opt);
}

EvalResult score_split(Seq2SeqTransformer& model, const Translator& tr, const VectorDataset& data, int64_t n) {
  const VectorDataset part = first_n(data, n);
  EvalOptions eo;
  eo.max_examples = part.size();
  EvalResult e = evaluate(model, part, eo);
  tr.add_metrics(e);
  return e;
}

double bleu_of(const EvalResult& e) {
  for (const auto& [k, v] : e.extra)
    if (k == "bleu") return v;
  return 0;
}

std::optional<RunResult> load_run(const StudyOptions& o, const GridConfig& c, uint64_t seed) {
  const std::string path = run_path(o, c.lang, c.heads, c.d_model, c.d_ff, seed);
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("options") || j["options"] != run_options(o, c.lang)) return std::nullopt;
  try {
    return run_from_json(j.at("run"));
  } catch (const nlohmann::json::exception& e) {
    fail<IOError>("heads_study", "{} is not a saved run ({}); hint: delete it to train the run again", path, e.what());
  }
}

void save_run(const StudyOptions& o, const RunResult& r) {
  std::filesystem::create_directories(o.out_dir + "/runs");
  write_file_atomic(run_path(o, r.lang, r.heads, r.d_model, r.d_ff, r.seed),
                    nlohmann::json{{"options", run_options(o, r.lang)}, {"run", run_json(r)}}.dump() + "\n");
}

std::vector<GridConfig> study_grid(const StudyOptions& o) {
  std::vector<GridConfig> grid;
  for (const std::string& lang : o.langs) {
    for (int64_t h : o.heads) grid.push_back({lang, h, o.model.d_model, o.model.d_ff, true, false});
    if (std::find(o.width_langs.begin(), o.width_langs.end(), lang) == o.width_langs.end()) continue;
    for (int64_t h : o.width_heads) {
      const int64_t E = h * o.head_width;
      auto same = std::find_if(grid.begin(), grid.end(), [&](const GridConfig& c) {
        return c.lang == lang && c.heads == h && c.d_model == E && c.d_ff == 4 * E;
      });
      if (same != grid.end()) same->constant_d = true;
      else grid.push_back({lang, h, E, 4 * E, false, true});
    }
  }
  return grid;
}

StudyOptions options_for(const StudyOptions& o, const GridConfig& c) {
  StudyOptions s = o;
  s.model.d_model = c.d_model;
  s.model.d_ff = c.d_ff;
  return s;
}

std::vector<StepTiming> interleaved_step_times(const StudyOptions& o, const std::vector<GridConfig>& grid,
                                               const std::vector<const Corpus*>& corpora) {
  const int threads = num_threads();
  set_num_threads(1);
  std::vector<StepTiming> timing;
  for (const GridConfig& c : grid) timing.push_back({c, {}, 0});
  const size_t n = grid.size();
  for (int64_t round = 0; round < o.timing_rounds; ++round)
    for (size_t k = 0; k < n; ++k) {
      StepTiming& t = timing[(k + static_cast<size_t>(round)) % n];
      const auto corpus = std::find_if(corpora.begin(), corpora.end(),
                                       [&](const Corpus* x) { return x->translator.task.lang == t.config.lang; });
      if (corpus == corpora.end()) fail<ValueError>("heads_study", "no corpus loaded for language '{}'", t.config.lang);
      TransformerConfig cfg = options_for(o, t.config).model;
      cfg.heads = t.config.heads;
      cfg.src_vocab = (*corpus)->translator.src_vocab.size();
      cfg.tgt_vocab = (*corpus)->translator.tgt_vocab.size();
      Generator init(1);
      auto dropout = std::make_shared<Generator>(2);
      Seq2SeqTransformer model(cfg, init, dropout);
      TrainOptions to = o.training;
      to.steps = o.timing_steps;
      to.warmup = 0;
      to.eval_every = 0;
      to.quiet = true;
      to.samples = 0;
      LoaderOptions lo;
      lo.batch_size = to.batch_size;
      lo.seed = static_cast<uint64_t>(round + 1);
      DataLoader loader((*corpus)->train, lo);
      const VectorDataset one = first_n((*corpus)->valid, 1);
      const TaskHooks hooks = (*corpus)->translator.hooks();
      const std::unique_ptr<TrainTask> task = seq2seq_task(model, dropout, loader, one, hooks);
      const RunSummary s = app::train(*task, to);
      t.ms.push_back(1e3 * s.step_seconds / static_cast<double>(to.steps));
    }
  for (StepTiming& t : timing) {
    std::vector<double> ms = t.ms;
    std::sort(ms.begin(), ms.end());
    t.median_ms = ms.empty() ? 0 : ms.size() % 2 ? ms[ms.size() / 2] : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2;
  }
  set_num_threads(threads);
  return timing;
}

std::string planned_compute(const StudyOptions& o, const std::vector<StepTiming>& timing) {
  std::string s;
  double total = 0;
  for (const std::string& lang : o.langs) {
    double minutes = 0;
    int64_t models = 0;
    std::string shapes;
    for (const StepTiming& t : timing)
      if (t.config.lang == lang) {
        minutes += static_cast<double>(o.seeds * o.steps_for(lang)) * t.median_ms / 6e4;
        models += o.seeds;
        shapes += fmt::format(" H{}/E{} {:.0f}", t.config.heads, t.config.d_model, t.median_ms);
      }
    total += minutes;
    s += fmt::format("  {}: {} models x {} steps: {:.1f} core-minutes (ms/step:{})\n", lang, models, o.steps_for(lang),
                     minutes, shapes);
  }
  return fmt::format("planned training compute (measured step times at 1 thread; evaluation not counted): {:.1f} "
                     "core-minutes\n{}", total, s);
}

void write_curve_reports(const StudyOptions& o, const std::vector<RunResult>& runs,
                         const std::vector<StepTiming>& timing) {
  const std::vector<GridConfig> grid = study_grid(o);
  std::string axes_md = "# Both axes of H: constant E against constant D\n\n", axes_jsonl;
  for (const std::string& lang : o.langs) {
    std::string jsonl;
    for (const RunResult& r : runs)
      if (r.lang == lang) jsonl += run_json(r).dump() + "\n";
    write_file_atomic(o.out_dir + "/curves-" + lang + ".jsonl", jsonl);
    write_file_atomic(o.out_dir + "/curves-" + lang + ".md", curves_markdown(o, axis_of(grid, lang, false), runs, lang));
    axes_md += axes_markdown(o, grid, runs, timing, lang) + "\n";
  }
  for (const StepTiming& t : timing)
    axes_jsonl += nlohmann::json{{"lang", t.config.lang}, {"heads", t.config.heads}, {"d_model", t.config.d_model},
                                 {"d_ff", t.config.d_ff}, {"constant_e", t.config.constant_e},
                                 {"constant_d", t.config.constant_d}, {"step_ms", t.ms}, {"median_ms", t.median_ms}}
                      .dump() +
                  "\n";
  write_file_atomic(o.out_dir + "/axes.md", axes_md);
  write_file_atomic(o.out_dir + "/axes.jsonl", axes_jsonl);
  write_file_atomic(o.out_dir + "/composition.md", composition_markdown(o, grid, runs));
}

}  // namespace attograd::app::heads
