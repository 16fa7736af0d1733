#include "examples/head_probe/translate_probe.h"

#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>

#include <attograd/data/loader.h>
#include "examples/common/cli.h"
#include "examples/head_probe/lm_probe.h"
#include "examples/head_probe/probe_cli.h"

namespace attograd::app::probe {

using heads::HeadRef;

namespace {

constexpr AttentionType kTypes[] = {AttentionType::encoder_self, AttentionType::decoder_self,
                                    AttentionType::decoder_cross};

}  // namespace

const char* attention_type_name(AttentionType t) {
  switch (t) {
    case AttentionType::encoder_self: return "encoder_self";
    case AttentionType::decoder_self: return "decoder_self";
    case AttentionType::decoder_cross: return "decoder_cross";
  }
  return "?";
}

AttentionType attention_type_of(const std::string& module) {
  if (module.starts_with("encoder.")) return AttentionType::encoder_self;
  return module.ends_with("cross_attn") ? AttentionType::decoder_cross : AttentionType::decoder_self;
}

std::vector<heads::AblationBatch> first_batches(const Dataset& data, int64_t n, int64_t batch) {
  if (batch < 1) fail<ValueError>("first_batches", "batch must be at least 1, got {}", batch);
  const int64_t count = n > 0 ? std::min(n, data.size()) : data.size();
  VectorDataset first;
  for (int64_t i = 0; i < count; ++i) first.add(data.get(i));
  LoaderOptions lo;
  lo.batch_size = batch;
  lo.shuffle = false;
  DataLoader loader(first, lo);
  std::vector<heads::AblationBatch> out;
  for (const Batch& b : loader.epoch_batches())
    out.push_back({b.src, b.tgt_in, b.tgt_out, b.src_key_padding_mask, b.tgt_key_padding_mask});
  return out;
}

ParallelText checkpoint_split(const TranslationTask& task, const std::string& split, const std::string& data_dir,
                              const std::string& locale_dir) {
  if (split != "valid" && split != "test")
    fail<ValueError>("flags", "--split must be valid or test, got '{}'", split);
  if (!task.is_text()) return read_split(data_dir.empty() ? default_corpus_dir() : data_dir, split, task.lang);
  TextCorpus c = read_text_corpus(task, locale_dir);
  if (pairs_crc32(c.train) != task.train_crc)
    fail<ValueError>("head_probe translate", "the corpus's training part is not the one the checkpoint trained on "
                     "(CRC-32 {:08x}, the checkpoint's {:08x}), so its {} part may hold training pairs; hint: the "
                     "catalogs under --locale-dir (or the corpus directory) must be the ones training read",
                     pairs_crc32(c.train), task.train_crc, split);
  return split == "valid" ? std::move(c.valid) : std::move(c.test);
}

namespace {

// The removal orders of one set of heads (scores in the same order as heads).
std::vector<std::pair<std::string, std::vector<HeadRef>>> removal_orders(
    const std::vector<HeadRef>& heads, const std::vector<double>& raw, const std::vector<double>& normalized,
    const std::vector<double>& delta, int64_t random_orders, uint64_t seed) {
  std::vector<std::pair<std::string, std::vector<HeadRef>>> orders = {
      {"importance", heads::ascending_order(heads, raw)},
      {"importance_normalized", heads::ascending_order(heads, normalized)},
      {"ablation", heads::ascending_order(heads, delta)}};
  for (int64_t r = 1; r <= random_orders; ++r)
    orders.emplace_back(fmt::format("random-{}", r),
                        heads::random_order(heads, mix_seed(seed, static_cast<uint64_t>(r))));
  return orders;
}

}  // namespace

nlohmann::json probe_translate(Seq2SeqTransformer& model, const std::vector<heads::AblationBatch>& batches,
                               const TranslateProbeOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const heads::LossBatches loss = heads::seq2seq_loss(model, batches, kPadId);
  // Every head, its type and its layer within the type (modules come in layer order).
  std::vector<HeadRef> all;
  std::map<std::string, std::pair<AttentionType, int64_t>> where;
  std::map<AttentionType, int64_t> layers;
  for (const auto& [name, m] : attention_modules(model)) {
    const AttentionType type = attention_type_of(name);
    where[name] = {type, layers[type]++};
    for (int64_t h = 0; h < m->num_heads; ++h) all.emplace_back(name, h);
  }
  nlohmann::json seconds;

  auto t = std::chrono::steady_clock::now();
  double baseline = 0;
  const std::vector<heads::HeadAblation> ablation = heads::ablate_heads(model, loss, &baseline);
  seconds["ablation"] = seconds_since(t);
  t = std::chrono::steady_clock::now();
  const std::vector<heads::HeadImportance> importance =
      heads::head_importance(model, loss, heads::full_head_mask(model));
  seconds["importance"] = seconds_since(t);
  t = std::chrono::steady_clock::now();
  heads::HeadStatistics stats;
  for (const heads::AblationBatch& b : batches)
    stats.add_batch(model, b.src, b.tgt_in, b.src_key_padding_mask, b.tgt_key_padding_mask, true);
  std::map<HeadRef, heads::HeadStat> stat_of;  // statistics come in forward order, the rest in module order
  for (const heads::HeadStat& s : stats.results()) stat_of[{s.module, s.head}] = s;
  seconds["statistics"] = seconds_since(t);

  double tokens = 0;
  for (size_t i = 0; i < loss.batches; ++i)
    for (double id : batches[i].tgt_out.to_vector<double>()) tokens += id != static_cast<double>(kPadId);
  nlohmann::json heads_json = nlohmann::json::array();
  std::map<AttentionType, std::vector<size_t>> of_type;  // indices into all
  for (size_t i = 0; i < all.size(); ++i) {
    const auto [type, layer] = where.at(all[i].first);
    of_type[type].push_back(i);
    const heads::HeadStat& s = stat_of.at(all[i]);
    nlohmann::json h = {{"type", attention_type_name(type)}, {"layer", layer}, {"head", all[i].second},
                        {"module", all[i].first},
                        {"importance", importance[i].importance},
                        {"importance_normalized", importance[i].normalized},
                        {"ablation_loss", ablation[i].loss}, {"ablation_delta", ablation[i].delta},
                        {"entropy", s.entropy}, {"uniform_entropy", s.uniform_entropy},
                        {"mean_distance", s.mean_distance}, {"max_weight", s.max_weight},
                        {"previous_token", s.previous}, {"self", s.self}, {"next_token", s.next},
                        {"first_position", s.first}, {"offset", s.offset}, {"offset_mass", s.offset_mass},
                        {"rows", s.rows}};
    if (type == AttentionType::decoder_self) {
      h["induction"] = s.induction;
      h["induction_chance"] = s.induction_chance;
    }
    if (type == AttentionType::decoder_cross) {
      h["last_source"] = s.last;
      h["diagonal"] = s.diagonal;
    }
    heads_json.push_back(std::move(h));
  }

  t = std::chrono::steady_clock::now();
  std::vector<double> fractions;
  for (int i = 0; i <= 10; ++i) fractions.push_back(i / 10.0);
  std::map<std::string, double> cache;  // one mask measured once, whichever curve meets it
  // The curves of the heads idx (indices into all): only they are removed.
  const auto curves = [&](const std::vector<size_t>& idx, uint64_t seed, bool name_type) {
    std::vector<HeadRef> heads;
    std::vector<double> raw, normalized, delta;
    for (size_t i : idx) {
      heads.push_back(all[i]);
      raw.push_back(importance[i].importance);
      normalized.push_back(importance[i].normalized);
      delta.push_back(ablation[i].delta);
    }
    const std::vector<int64_t> ks = pruning_counts(static_cast<int64_t>(heads.size()));
    nlohmann::json orders_json = nlohmann::json::array();
    for (const auto& [name, order] : removal_orders(heads, raw, normalized, delta, o.random_orders, seed)) {
      nlohmann::json removal = nlohmann::json::array();
      for (const HeadRef& h : order) {
        const auto [type, layer] = where.at(h.first);
        removal.push_back(name_type ? nlohmann::json{attention_type_name(type), layer, h.second}
                                    : nlohmann::json{layer, h.second});
      }
      orders_json.push_back({{"name", name}, {"heads", removal},
                             {"loss", heads::pruning_curve(model, loss, order, ks, &cache)}});
    }
    return nlohmann::json{{"fractions", fractions}, {"removed", ks}, {"heads", heads.size()}, {"orders", orders_json}};
  };
  nlohmann::json by_type = nlohmann::json::object();
  for (size_t ti = 0; ti < std::size(kTypes); ++ti)
    by_type[attention_type_name(kTypes[ti])] = curves(of_type[kTypes[ti]], mix_seed(o.seed, ti + 1), false);
  std::vector<size_t> every(all.size());
  for (size_t i = 0; i < every.size(); ++i) every[i] = i;
  const nlohmann::json global = curves(every, o.seed, true);
  seconds["pruning"] = seconds_since(t);
  seconds["total"] = seconds_since(start);

  nlohmann::json types = nlohmann::json::array();
  for (AttentionType ty : kTypes) types.push_back(attention_type_name(ty));
  return {{"baseline_loss", baseline},
          {"tokens", static_cast<int64_t>(tokens)},
          {"types", types},
          {"importance", "once, full model"},
          {"importance_batches", batches.size()},
          {"heads", heads_json},
          {"pruning", {{"masks_evaluated", cache.size()}, {"by_type", by_type}, {"global", global}}},
          {"seconds", seconds}};
}

namespace {

cxxopts::Options translate_options(const std::string& program) {
  cxxopts::Options o(program, "Per-head importance (Michel et al. 2019), ablation, attention statistics and pruning "
                     "curves per attention type (encoder self, decoder self, decoder cross) and over all heads, of a "
                     "translate checkpoint, on the first sentences of its corpus's valid or test split; written as "
                     "JSON.");
  o.add_options()
      ("checkpoint", "checkpoint directory of translate train (its newest checkpoint), or a model file",
       cxxopts::value<std::string>()->default_value(""))
      ("split", "valid or test, of the checkpoint's own corpus", cxxopts::value<std::string>()->default_value("valid"))
      ("sentences", "the first N sentence pairs of the split (0: all)", cxxopts::value<int64_t>()->default_value("500"))
      ("data", "numbers: the corpus directory (default: the one beside the program)",
       cxxopts::value<std::string>()->default_value(""))
      ("locale-dir", "gettext: where the catalogs are",
       cxxopts::value<std::string>()->default_value("/usr/share/locale"));
  add_probe_flags(o, "sentences", "compute threads (results are the same for any count)", 1);
  return o;
}

}  // namespace

int translate_main(int argc, char** argv) {
  cxxopts::Options options = translate_options(argv[0]);
  const cxxopts::ParseResult r = cli::parse_flags(options, argc, argv);
  const std::optional<ProbeFlags> f = read_probe_flags(options, r, "head_probe translate");
  if (!f) return 0;
  const int64_t sentences = cli::flag_in_range<int64_t>(r, "sentences", 0, 10'000'000);
  TranslateProbeOptions po;
  po.random_orders = f->random_orders;
  po.seed = f->seed;
  const std::string split = r["split"].as<std::string>();
  if (split != "valid" && split != "test") fail<ValueError>("flags", "--split must be valid or test, got '{}'", split);

  const auto start = std::chrono::steady_clock::now();
  TrainedTranslator l = load_translator(r["checkpoint"].as<std::string>());
  const ParallelText text =
      checkpoint_split(l.tr.task, split, r["data"].as<std::string>(), r["locale-dir"].as<std::string>());
  const VectorDataset data = l.tr.encode(text);
  if (data.size() == 0) fail<ValueError>("head_probe translate", "{} has no sentence pairs", text.name);
  const int64_t n = sentences > 0 ? std::min(sentences, data.size()) : data.size();
  for (int64_t i = 0; i < n; ++i) {
    const Example& e = data.examples()[static_cast<size_t>(i)];
    const size_t longest = std::max(e.src.size(), e.tgt.size());
    if (static_cast<int64_t>(longest) + 2 > l.model->config.max_len)
      fail<ValueError>("head_probe translate", "{} pair {} has {} tokens; the model accepts at most {}; hint: "
                       "--sentences {} stops before it", text.name, i + 1, longest, l.model->config.max_len - 2, i);
  }
  const std::vector<heads::AblationBatch> batches = first_batches(data, n, f->batch_size);
  nlohmann::json j = probe_translate(*l.model, batches, po);
  const TransformerConfig& c = l.model->config;
  j["config"] = {{"heads", c.heads}, {"kv_heads", c.decoder_kv_heads()}, {"enc_layers", c.enc_layers},
                 {"dec_layers", c.dec_layers}, {"d_model", c.d_model}, {"d_ff", c.d_ff},
                 {"src_vocab", c.src_vocab}, {"tgt_vocab", c.tgt_vocab}};
  j["task"] = l.tr.task.to_json();
  j["checkpoint"] = r["checkpoint"].as<std::string>();
  j["split"] = split;
  j["sentences"] = n;
  write_probe_json(j, *f, start);
  fmt::print("head_probe translate: {} heads, baseline loss {:.4f} on {} sentences ({} target tokens), {:.1f} s "
             "-> {}\n",
             j["heads"].size(), j["baseline_loss"].get<double>(), n, j["tokens"].get<int64_t>(),
             j["seconds"]["wall"].get<double>(), f->out);
  return 0;
}

}  // namespace attograd::app::probe
