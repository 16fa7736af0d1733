#include "examples/head_probe/lm_probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include <attograd/autograd/ops/loss.h>
#include <attograd/data/dataset.h>
#include <attograd/dist/communicator.h>
#include "examples/common/cli.h"
#include "examples/head_probe/probe_cli.h"
#include "examples/lm/lm_checkpoint.h"
#include "examples/lm/lm_task.h"

namespace attograd::app::probe {

using heads::HeadRef;

std::vector<LMBatch> heldout_batches(const TokenWindows& data, int64_t windows, int64_t batch) {
  if (batch < 1) fail<ValueError>("heldout_batches", "batch must be at least 1, got {}", batch);
  const int64_t n = windows > 0 ? std::min(windows, data.heldout_windows()) : data.heldout_windows();
  std::vector<LMBatch> out;
  for (int64_t first = 0; first < n; first += batch) out.push_back(data.heldout_batch(first, std::min(batch, n - first)));
  return out;
}

heads::LossBatches lm_loss(GPT& model, const std::vector<LMBatch>& batches) {
  return {batches.size(), [&model, &batches](size_t i) {
            const LMBatch& b = batches[i];
            CrossEntropyOptions ce;
            ce.reduction = Reduction::sum;
            const Tensor logits = model.forward(b.input);  // [B, T, V]
            return heads::BatchLoss{cross_entropy(logits.reshape({-1, model.config.vocab}), b.target.reshape({-1}), ce),
                                    static_cast<double>(b.target.numel())};
          }};
}

std::vector<heads::HeadStat> lm_attention_stats(GPT& model, const std::vector<LMBatch>& batches) {
  heads::HeadStatistics stats;
  for (const LMBatch& b : batches)
    stats.add_forward(
        model, [&](const std::string&) { return heads::AttentionRows{Tensor(), Tensor(), b.input, model.config.causal}; },
        [&] { model.forward(b.input); });
  return stats.results();
}

std::vector<int64_t> pruning_counts(int64_t n) {
  std::vector<int64_t> ks;
  for (int64_t i = 0; i <= 10; ++i) ks.push_back((i * n + 5) / 10);  // round(i·n / 10), halves up
  return ks;
}

nlohmann::json probe_lm(GPT& model, const std::vector<LMBatch>& batches, const ProbeOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const heads::LossBatches loss = lm_loss(model, batches);
  const auto modules = attention_modules(model);
  std::map<std::string, int64_t> layer_of;
  std::vector<HeadRef> all;
  for (size_t m = 0; m < modules.size(); ++m) {
    layer_of[modules[m].first] = static_cast<int64_t>(m);
    for (int64_t h = 0; h < modules[m].second->num_heads; ++h) all.emplace_back(modules[m].first, h);
  }
  nlohmann::json seconds;

  auto t = std::chrono::steady_clock::now();
  double baseline = 0;
  const std::vector<heads::HeadAblation> ablation = heads::ablate_heads(model, loss, &baseline);
  seconds["ablation"] = seconds_since(t);
  t = std::chrono::steady_clock::now();
  const std::vector<heads::HeadImportance> importance = heads::head_importance(model, loss, heads::full_head_mask(model));
  seconds["importance"] = seconds_since(t);
  t = std::chrono::steady_clock::now();
  const std::vector<heads::HeadStat> stats = lm_attention_stats(model, batches);
  seconds["statistics"] = seconds_since(t);

  double tokens = 0;
  for (const LMBatch& b : batches) tokens += static_cast<double>(b.target.numel());
  const int64_t group = model.config.heads / model.config.kv_head_count();  // query heads per K/V head
  nlohmann::json heads_json = nlohmann::json::array();
  std::vector<double> raw, normalized, delta;
  std::map<HeadRef, const heads::HeadStat*> stat_of;  // statistics come in forward order, the rest in module order
  for (const heads::HeadStat& s : stats) stat_of[{s.module, s.head}] = &s;
  for (size_t i = 0; i < all.size(); ++i) {
    const heads::HeadStat& s = *stat_of.at(all[i]);
    raw.push_back(importance[i].importance);
    normalized.push_back(importance[i].normalized);
    delta.push_back(ablation[i].delta);
    heads_json.push_back({{"layer", layer_of.at(all[i].first)}, {"head", all[i].second}, {"module", all[i].first},
                          {"kv_head", all[i].second / group},
                          {"importance", importance[i].importance},
                          {"importance_normalized", importance[i].normalized},
                          {"ablation_loss", ablation[i].loss}, {"ablation_delta", ablation[i].delta},
                          {"entropy", s.entropy}, {"uniform_entropy", s.uniform_entropy},
                          {"mean_distance", s.mean_distance}, {"max_weight", s.max_weight},
                          {"previous_token", s.previous}, {"self", s.self}, {"next_token", s.next},
                          {"first_position", s.first}, {"offset", s.offset}, {"offset_mass", s.offset_mass},
                          {"induction", s.induction}, {"induction_chance", s.induction_chance}, {"rows", s.rows}});
  }

  t = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, std::vector<HeadRef>>> orders = {
      {"importance", heads::ascending_order(all, raw)},
      {"importance_normalized", heads::ascending_order(all, normalized)},
      {"ablation", heads::ascending_order(all, delta)}};
  for (int64_t r = 1; r <= o.random_orders; ++r)
    orders.emplace_back(fmt::format("random-{}", r), heads::random_order(all, mix_seed(o.seed, static_cast<uint64_t>(r))));
  const std::vector<int64_t> ks = pruning_counts(static_cast<int64_t>(all.size()));
  std::map<std::string, double> cache;
  nlohmann::json orders_json = nlohmann::json::array();
  for (const auto& [name, order] : orders) {
    nlohmann::json removal = nlohmann::json::array();
    for (const HeadRef& h : order) removal.push_back({layer_of.at(h.first), h.second});
    orders_json.push_back({{"name", name}, {"heads", removal},
                           {"loss", heads::pruning_curve(model, loss, order, ks, &cache)}});
  }
  seconds["pruning"] = seconds_since(t);
  seconds["total"] = seconds_since(start);
  std::vector<double> fractions;
  for (int i = 0; i <= 10; ++i) fractions.push_back(i / 10.0);

  return {{"baseline_loss", baseline},
          {"tokens", static_cast<int64_t>(tokens)},
          {"importance", "once, full model"},
          {"importance_batches", batches.size()},
          {"heads", heads_json},
          {"pruning", {{"fractions", fractions}, {"removed", ks}, {"heads", all.size()},
                       {"masks_evaluated", cache.size()}, {"orders", orders_json}}},
          {"seconds", seconds}};
}

namespace {

cxxopts::Options lm_options(const std::string& program) {
  cxxopts::Options o(program, "Per-head importance (Michel et al. 2019), ablation, attention statistics and pruning "
                     "curves of an lm checkpoint, on the held-out windows lm eval reads; written as JSON.");
  o.add_options()
      ("checkpoint", "checkpoint directory of lm train (its newest checkpoint), or a model file",
       cxxopts::value<std::string>()->default_value(""))
      ("text", "the text whose held-out tail is read (default: the checkpoint's training text)",
       cxxopts::value<std::string>()->default_value(""))
      ("eval-size", "held-out windows (0: all); the trainer's evaluation reads the first --eval-size",
       cxxopts::value<int64_t>()->default_value("200"));
  add_probe_flags(o, "windows",
                  "compute threads (default: the cores this process may use; results are the same for any count)",
                  cli::usable_cores());
  return o;
}

}  // namespace

int lm_main(int argc, char** argv) {
  cxxopts::Options options = lm_options(argv[0]);
  const cxxopts::ParseResult r = cli::parse_flags(options, argc, argv);
  const std::optional<ProbeFlags> f = read_probe_flags(options, r, "head_probe lm");
  if (!f) return 0;
  const int64_t eval_size = cli::flag_in_range<int64_t>(r, "eval-size", 0, 10'000'000);
  ProbeOptions po;
  po.random_orders = f->random_orders;
  po.seed = f->seed;

  const auto start = std::chrono::steady_clock::now();
  LoadedLM l = load_lm_checkpoint(r["checkpoint"].as<std::string>());
  const LMHeldOut held = lm_heldout(l, r["text"].as<std::string>());
  const std::vector<LMBatch> batches = heldout_batches(held.windows, eval_size, f->batch_size);
  nlohmann::json j = probe_lm(*l.model, batches, po);
  const GPTConfig& c = l.model->config;
  j["config"] = {{"heads", c.heads}, {"kv_heads", c.kv_head_count()}, {"layers", c.layers}, {"d_model", c.d_model},
                 {"context", c.context}, {"causal", c.causal}, {"vocab", c.vocab}};
  j["checkpoint"] = r["checkpoint"].as<std::string>();
  j["step"] = l.step ? nlohmann::json(*l.step) : nlohmann::json(nullptr);
  j["text"] = held.shown;
  j["heldout"] = held.heldout;
  j["windows"] = (eval_size > 0 ? std::min(eval_size, held.windows.heldout_windows()) : held.windows.heldout_windows());
  write_probe_json(j, *f, start);
  fmt::print("head_probe lm: {} heads, baseline loss {:.4f} on {} windows ({} tokens), {:.1f} s -> {}\n",
             c.layers * c.heads, j["baseline_loss"].get<double>(), j["windows"].get<int64_t>(),
             j["tokens"].get<int64_t>(), j["seconds"]["wall"].get<double>(), f->out);
  return 0;
}

}  // namespace attograd::app::probe
