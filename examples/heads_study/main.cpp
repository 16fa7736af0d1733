// heads_study: what multi-head attention buys on the number-translation task.
//
//   heads_study --quick            a few minutes: the whole pipeline on a small grid (used by the tests)
//   heads_study --full             the study of docs/heads-study.md (see there for its running time)
//   heads_study --full --part 1/2  only every second run of the grid, kept in --out/runs/ for a later
//                                  invocation (run --part 2/2 beside it, then --full to finish: two cores)
//   heads_study --kv-bench         only the KV-cache benchmark
//   heads_study --gqa              only experiment 6: grouped-query attention, quality against cache cost
//   heads_study --mask             only experiment 7: the causal mask's wasted work, and a model trained without it
//   heads_study --inspect CKPT     only the head inspection and pruning, of a model trained by `translate train`
//   heads_study --roles            only the head-role study: --seeds models with H = 4 per language
//   heads_study --inspect CKPT --roles   the head-role study of one checkpoint
//   heads_study --convert-gqa CKPT --kv-heads G --to OUT.model.safetensors
//                                  a translate checkpoint converted to grouped-query attention
//                                  (the decoder's K/V projections mean-pooled into G groups)
//
// It trains the same model (d_model fixed) with H in {1, 2, 4, 8, 16} heads on
// en→fr and en→de, several seeds each, and writes into --out:
//   heads.md, heads.svg, results.jsonl   quality and cost per H (mean ± std)
//   inspect-<lang>.md, inspect-<lang>/   per-head entropy, distance, ablation, alignment, attention pictures
//   pruning-<lang>.md, .jsonl            exact match and BLEU as heads are pruned by importance/ablation/random
//   roles-<lang>.md, .jsonl              gold-alignment accuracy per cross head and role, head scores,
//                                        heads matched across seeds (the H = 4 models of every seed)
//   kv-bench.md                          decoding with and without the KV cache
//   gqa-<lang>.md, .jsonl                G K/V heads from scratch, converted and uptrained: quality, cache, logits
//   mask-<lang>.md, .jsonl               the causal mask's wasted score work; training with and without it
//   curves-<lang>.md, .jsonl             learning curves, final quality and steps to a target per H, with 95% CIs
//   axes.md, axes.jsonl                  constant E against constant D: quality against parameters, FLOPs, step time
//   composition.md                       exact match on the composition split (gen.tsv) against test per H
// tools/plot_heads.py turns results.jsonl into heads.png (--study DIR: the curves and axes figures),
// tools/plot_gqa.py gqa-*.jsonl into gqa.png, tools/plot_roles.py roles-*.jsonl into the role x head matrix.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "examples/common/cli.h"
#include "examples/common/preflight.h"
#include "examples/heads_study/curves.h"
#include "examples/heads_study/roles.h"
#include "examples/heads_study/gqa_study.h"
#include "examples/heads_study/mask_study.h"
#include "examples/heads_study/study.h"

using namespace attograd;
using namespace attograd::app;
using namespace attograd::app::heads;

namespace {

StudyOptions full_study() {
  StudyOptions o;
  o.model.d_model = 64;
  o.model.d_ff = 256;
  o.model.enc_layers = 2;
  o.model.dec_layers = 2;
  o.model.dropout = 0.0;
  o.model.max_len = 96;
  o.training.steps = 600;  // below saturation: fr reaches 99.8% at 1,000 steps (H = 4), which hides differences
  // The learning curves show that these budgets flatten: fr H >= 2 reach 99% valid token accuracy by step 500-650,
  // de by step 800-1,150; the whole study then takes about 49 minutes on 2 cores (docs/heads-study.md).
  o.steps_per_lang = {{"fr", 1000}, {"de", 2000}};
  o.training.batch_size = 64;
  o.training.lr = 3e-3;
  o.training.schedule = "cosine";
  o.training.warmup = 100;
  return o;
}

StudyOptions quick_study() {
  StudyOptions o = full_study();
  o.out_dir = "runs/heads-quick";
  o.langs = {"fr"};
  o.heads = {1, 4};
  o.seeds = 1;
  o.model.d_model = 32;
  o.model.d_ff = 64;
  o.model.enc_layers = 1;
  o.model.dec_layers = 1;
  o.training.steps = 40;
  o.training.batch_size = 16;
  o.training.warmup = 5;
  o.eval_size = 32;
  o.ablation_size = 16;
  o.roles_size = 32;
  o.picture_inputs = {"seventy-one thousand"};
  o.kv_lengths = {8, 16};
  o.kv_batch = 4;
  o.kv_repeats = 1;
  o.steps_per_lang = {};
  o.curve_every = 10;
  o.curve_size = 32;
  o.width_heads = {1, 2};
  o.timing_rounds = 2;
  o.timing_steps = 2;
  return o;
}

// Experiments 6 and 7 on the quick study's tiny model.
GqaOptions quick_gqa() {
  GqaOptions g;
  g.seeds = 1;
  g.lengths = {8, 16};
  g.batch = 4;
  g.repeats = 1;
  g.logit_sentences = 16;
  return g;
}
MaskOptions quick_mask(const StudyOptions& o) {
  MaskOptions m;
  m.steps = o.training.steps;
  m.lengths = {8, 16};
  m.batch = 2;
  m.repeats = 1;
  return m;
}

// --part i/n: {i, n}, 1 <= i <= n.
std::pair<int64_t, int64_t> part_flag(const std::string& text) {
  int64_t i = 0, n = 0;
  char slash = 0;
  std::istringstream in(text);
  if (!(in >> i >> slash >> n) || slash != '/' || !in.eof() || i < 1 || n < 1 || i > n || n > 64)
    fail<ValueError>("flags", "--part must be i/n with 1 <= i <= n <= 64, got '{}'", text);
  return {i, n};
}

template <class T>
std::vector<T> list_flag(const cxxopts::ParseResult& r, const char* flag, std::vector<T> fallback) {
  return r.count(flag) ? r[flag].as<std::vector<T>>() : fallback;
}

int run(const cxxopts::ParseResult& r) {
  if (r.count("quick") && r.count("full")) fail<ValueError>("flags", "--quick and --full exclude each other");
  if (r.count("gqa") + r.count("mask") + r.count("kv-bench") + (r.count("inspect") || r.count("roles")) > 1)
    fail<ValueError>("flags", "--gqa, --mask, --kv-bench and --inspect or --roles each run one part; give one of them");
  if (r.count("convert-gqa")) {
    if (!r.count("to") || !r.count("kv-heads"))
      fail<ValueError>("flags", "--convert-gqa needs --kv-heads G and --to OUT.model.safetensors");
    const auto g = r["kv-heads"].as<std::vector<int64_t>>();
    if (g.size() != 1) fail<ValueError>("flags", "--convert-gqa takes one --kv-heads value, got {}", g.size());
    check_file_writable(r["to"].as<std::string>(), "to");
    fmt::print("{}\n", convert_to_grouped_query(r["convert-gqa"].as<std::string>(), g[0], r["to"].as<std::string>()));
    return 0;
  }
  StudyOptions o = r.count("quick") ? quick_study() : full_study();
  if (r.count("out")) o.out_dir = r["out"].as<std::string>();
  o.data_dir = r["data"].as<std::string>();
  o.langs = list_flag<std::string>(r, "langs", o.langs);
  o.heads = list_flag<int64_t>(r, "heads", o.heads);
  if (r.count("seeds")) o.seeds = r["seeds"].as<int64_t>();
  if (r.count("steps")) {
    o.training.steps = r["steps"].as<int64_t>();
    o.steps_per_lang.clear();
  }
  for (const std::string& item : list_flag<std::string>(r, "lang-steps", {})) {
    const size_t eq = item.find('=');
    int64_t n = 0;
    std::istringstream in(eq == std::string::npos ? "" : item.substr(eq + 1));
    if (!(in >> n) || !in.eof() || n < 1 || n > 10'000'000)
      fail<ValueError>("flags", "--lang-steps expects lang=N with 1 <= N <= 10000000, got '{}'", item);
    o.steps_per_lang[item.substr(0, eq)] = n;
  }
  o.width_heads = list_flag<int64_t>(r, "width-heads", o.width_heads);
  if (o.seeds < 1 || o.seeds > 100) fail<ValueError>("flags", "--seeds must be in [1, 100], got {}", o.seeds);
  if (o.training.steps < 1 || o.training.steps > 10'000'000)
    fail<ValueError>("flags", "--steps must be in [1, 10000000], got {}", o.training.steps);
  if (o.training.warmup >= o.training.steps) o.training.warmup = o.training.steps / 10;
  for (int64_t h : o.heads)
    if (h < 1 || o.model.d_model % h != 0)
      fail<ValueError>("flags", "--heads {} does not divide d_model {}", h, o.model.d_model);
  std::sort(o.heads.begin(), o.heads.end());
  for (int64_t h : o.width_heads)
    if (h < 1 || h > 64) fail<ValueError>("flags", "--width-heads must be in [1, 64], got {}", h);
  if (std::find(o.heads.begin(), o.heads.end(), o.inspect_heads) == o.heads.end()) o.inspect_heads = o.heads.back();
  o.kv_groups = list_flag<int64_t>(r, "kv-heads", {o.inspect_heads});
  for (int64_t g : o.kv_groups)
    if (g < 1 || o.inspect_heads % g != 0)
      fail<ValueError>("flags", "--kv-heads {} does not divide the benchmarked heads {}", g, o.inspect_heads);
  o.training.threads = r["threads"].as<int>();  // the pool is sized already (cli::parse_flags)
  const auto [part, parts] = r.count("part") ? part_flag(r["part"].as<std::string>()) : std::pair<int64_t, int64_t>{1, 1};
  check_dir_writable(o.out_dir, "out");
  GqaOptions gqa = r.count("quick") ? quick_gqa() : GqaOptions();
  MaskOptions mask = r.count("quick") ? quick_mask(o) : MaskOptions();
  if (r.count("seeds")) gqa.seeds = o.seeds;
  if (r.count("steps")) mask.steps = o.training.steps;
  const std::string mask_lang = o.langs.front();

  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return cli::format_duration(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()); };
  std::vector<std::string> budgets;
  for (const std::string& lang : o.langs) budgets.push_back(fmt::format("{} {}", lang, o.steps_for(lang)));
  fmt::print("heads_study: langs {} | heads {} (constant D {}: {}) | {} seed(s) | steps {} | d_model {} | {}\n",
             fmt::join(o.langs, ","), fmt::join(o.heads, ","), o.head_width,
             fmt::join(o.width_heads, ","), o.seeds, fmt::join(budgets, ", "), o.model.d_model, cli::compute_summary());

  if (r.count("inspect")) {
    TrainedTranslator t = load_translator(r["inspect"].as<std::string>());
    const std::string lang = t.tr.task.lang;
    Corpus corpus{std::move(t.tr), VectorDataset(), VectorDataset()};
    corpus.train = corpus.translator.encode(read_split(o.data_dir, "train", lang));
    corpus.test = corpus.translator.encode(read_split(o.data_dir, "test", lang));
    if (r.count("roles")) {
      std::vector<RoleModel> one;
      one.push_back({1, std::move(t.model)});
      roles_study(o, corpus, one);
      fmt::print("wrote {}/roles-{}.md, roles-{}.jsonl\n", o.out_dir, lang, lang);
      return 0;
    }
    fmt::print("{}", inspect_model(o, corpus, *t.model, "checkpoint " + r["inspect"].as<std::string>()));
    write_pruning_report(o, corpus, t.model->config.heads, {pruning_curves(o, corpus, *t.model, 1)});
    fmt::print("wrote {}/pruning-{}.md\n", o.out_dir, lang);
    return 0;
  }
  if (r.count("gqa")) {
    for (const std::string& lang : o.langs) fmt::print("plan: {}\n", gqa_plan(o, gqa, lang));
    for (const std::string& lang : o.langs) {
      gqa_study(o, gqa, load_corpus(o.data_dir, lang));
      fmt::print("[{}] wrote {}/gqa-{}.md, .jsonl\n", elapsed(), o.out_dir, lang);
    }
    return 0;
  }
  if (r.count("mask")) {
    fmt::print("plan: {}\n{}", mask_plan(mask, mask_lang), mask_study(o, mask, load_corpus(o.data_dir, mask_lang)));
    return 0;
  }
  if (r.count("kv-bench")) {
    fmt::print("{}", kv_bench(o, load_corpus(o.data_dir, o.langs.front())));
    return 0;
  }
  if (r.count("roles")) {
    for (const std::string& lang : o.langs)
      if (!has_gold_alignments(lang))
        fail<ValueError>("flags", "--roles: gold alignments exist for fr and de, got '{}'; hint: --langs fr,de", lang);
    for (const std::string& lang : o.langs) {
      const Corpus corpus = load_corpus(o.data_dir, lang);
      std::vector<RoleModel> models;
      for (int64_t seed = 1; seed <= o.seeds; ++seed) {
        models.push_back({static_cast<uint64_t>(seed), nullptr});
        const RunResult x = train_run(o, corpus, o.inspect_heads, static_cast<uint64_t>(seed), &models.back().model);
        fmt::print("[{}] {} H={} seed {}: exact match {:.1f}%\n", elapsed(), lang, o.inspect_heads, seed, x.exact_match);
        std::fflush(stdout);
      }
      roles_study(o, corpus, models);
      fmt::print("[{}] {}: wrote {}/roles-{}.md, roles-{}.jsonl\n", elapsed(), lang, o.out_dir, lang, lang);
    }
    return 0;
  }
  for (const std::string& lang : o.langs) fmt::print("plan: {}\n", gqa_plan(o, gqa, lang));
  fmt::print("plan: {}\n", mask_plan(mask, mask_lang));
  std::vector<RunResult> runs;
  std::vector<Corpus> corpora;
  for (const std::string& lang : o.langs) corpora.push_back(load_corpus(o.data_dir, lang));
  const std::vector<GridConfig> grid = study_grid(o);
  std::vector<const Corpus*> loaded;
  for (const Corpus& c : corpora) loaded.push_back(&c);
  std::vector<StepTiming> timing;
  if (parts == 1) {
    timing = interleaved_step_times(o, grid, loaded);
    fmt::print("[{}] {}", elapsed(), planned_compute(o, timing));
    std::fflush(stdout);
  }
  int64_t index = 0;  // of the runs a part may take (not the inspected ones)
  for (const Corpus& corpus : corpora) {
    const std::string lang = corpus.translator.task.lang;
    std::vector<RoleModel> inspected;  // H = o.inspect_heads at constant E, every seed
    for (const GridConfig& c : grid)
      for (int64_t seed = 1; seed <= o.seeds && c.lang == lang; ++seed) {
        const bool keep = c.constant_e && c.heads == o.inspect_heads;
        const bool mine = !keep && in_part(index, part, parts);
        if (!keep) ++index;
        if (parts > 1 && !mine) continue;
        std::optional<RunResult> saved = keep ? std::nullopt : load_run(o, c, static_cast<uint64_t>(seed));
        const bool trained = !saved;
        if (keep) inspected.push_back({static_cast<uint64_t>(seed), nullptr});
        if (trained) {
          saved = train_run(options_for(o, c), corpus, c.heads, static_cast<uint64_t>(seed),
                            keep ? &inspected.back().model : nullptr);
          if (!keep) save_run(o, *saved);
        }
        runs.push_back(*saved);
        const RunResult& x = runs.back();
        fmt::print("[{}] {} H={:<2} E={:<3} seed {}: exact match {:.1f}% (gen {:.1f}%)  BLEU {:.1f}  test loss {:.4f}  "
                   "step {:.1f} ms{}\n", elapsed(), lang, c.heads, c.d_model, seed, x.exact_match, x.gen_exact_match,
                   x.bleu, x.loss, x.step_ms, trained ? "" : " (saved run)");
        std::fflush(stdout);
      }
    if (parts > 1) continue;
    write_grid_report(o, runs);
    write_curve_reports(o, runs, timing);
    inspect_model(o, corpus, *inspected.front().model, fmt::format("{} steps, seed 1 of the grid", o.steps_for(lang)));
    std::vector<PruningRun> pruned;  // every seed's inspected model
    for (RoleModel& m : inspected) pruned.push_back(pruning_curves(o, corpus, *m.model, m.seed));
    write_pruning_report(o, corpus, o.inspect_heads, pruned);
    if (has_gold_alignments(lang)) roles_study(o, corpus, inspected);
    fmt::print("[{}] {}: wrote {}/inspect-{}.md, pruning-{}.md, roles-{}.md\n", elapsed(), lang, o.out_dir, lang, lang,
               lang);
  }
  if (parts > 1) {
    fmt::print("[{}] part {}/{} done: its runs are in {}/runs/\n", elapsed(), part, parts, o.out_dir);
    return 0;
  }
  kv_bench(o, load_corpus(o.data_dir, o.langs.front()));
  for (const std::string& lang : o.langs) {
    gqa_study(o, gqa, load_corpus(o.data_dir, lang));
    fmt::print("[{}] {}: wrote {}/gqa-{}.md\n", elapsed(), lang, o.out_dir, lang);
  }
  mask_study(o, mask, load_corpus(o.data_dir, mask_lang));
  fmt::print("[{}] done: {}/heads.md, heads.svg, results.jsonl, curves-*.md, curves-*.jsonl, axes.md, axes.jsonl, "
             "composition.md, inspect-*.md, pruning-*.md, roles-*.md, kv-bench.md, gqa-*.md, mask-{}.md\n", elapsed(),
             o.out_dir, mask_lang);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::guarded_main("heads_study", [&] {
    cxxopts::Options o("heads_study", "How the number of attention heads trades quality against compute, what heads "
                       "learn, and what the KV cache keeps.");
    o.add_options()
        ("quick", "a small grid in a few minutes (checks the pipeline)")
        ("full", "the whole study (the default)")
        ("kv-bench", "only the KV-cache benchmark")
        ("roles", "only the head-role study (gold alignments, head scores, seeds matched): trains --seeds models "
         "with H = 4 per language, or studies the --inspect checkpoint")
        ("gqa", "only experiment 6: H = 8 with G = 1, 2, 8 K/V heads, from scratch and uptrained from the multi-head "
         "model: quality against KV-cache bytes and cached ms/token")
        ("mask", "only experiment 7: the causal mask's wasted score work, and a model trained without the mask "
         "(the first of --langs)")
        ("inspect", "only inspect the heads of a trained translate checkpoint (directory or .model.safetensors)",
         cxxopts::value<std::string>())
        ("convert-gqa", "only convert a translate checkpoint (directory or .model.safetensors) to grouped-query "
         "attention: the decoder's K/V projections mean-pooled into --kv-heads groups, written to --to",
         cxxopts::value<std::string>())
        ("kv-heads", "K/V heads G: the target of --convert-gqa; for the KV-cache bench, comma-separated, each "
         "dividing the benchmarked H (default: H)", cxxopts::value<std::vector<int64_t>>())
        ("to", "the *.model.safetensors file --convert-gqa writes", cxxopts::value<std::string>())
        ("out", "output directory (default runs/heads, runs/heads-quick with --quick)", cxxopts::value<std::string>())
        ("data", "corpus directory", cxxopts::value<std::string>()->default_value(default_corpus_dir()))
        ("langs", "target languages, comma-separated", cxxopts::value<std::vector<std::string>>())
        ("heads", "head counts, comma-separated (each must divide d_model)", cxxopts::value<std::vector<int64_t>>())
        ("seeds", "seeds per setting", cxxopts::value<int64_t>())
        ("steps", "training steps per run, every language (default: per language, fr 1000, de 2000)",
         cxxopts::value<int64_t>())
        ("part", "i/n: train only every n-th run of the grid from the i-th (not the inspected ones), keep them in "
         "--out/runs/ and stop; a later invocation without --part reuses them", cxxopts::value<std::string>())
        ("lang-steps", "per-language step budgets, e.g. fr=1000,de=1500 (after --steps)",
         cxxopts::value<std::vector<std::string>>())
        ("width-heads", "head counts of the constant-D axis (D = 16, E = 16·H), comma-separated",
         cxxopts::value<std::vector<int64_t>>())
        ("threads", "compute threads (default: the cores this process may use; results are the same for any count)",
         cxxopts::value<int>()->default_value(std::to_string(cli::usable_cores())))
        ("h,help", "show this help");
    auto r = cli::parse_flags(o, argc, argv);
    if (r.count("help")) {
      fmt::print("{}\n", o.help());
      return 0;
    }
    if (!r.unmatched().empty()) fail<ValueError>("flags", "unexpected argument '{}'", r.unmatched()[0]);
    return run(r);
  });
}
