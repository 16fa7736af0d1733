#include "examples/head_probe/gqa_convert.h"

#include <filesystem>

#include <fmt/format.h>

#include <attograd/autograd/engine.h>
#include <attograd/nn/attention.h>
#include "examples/common/checkpoint.h"
#include "examples/common/checkpoint_model.h"
#include "examples/common/cli.h"

namespace attograd::app::probe {

namespace fs = std::filesystem;

namespace {

// proj [G0·D, in] (or a bias [G0·D]) -> [G·D, in]: head g·R of each group of R.
Tensor first_kv_head_of_each_group(const Tensor& proj, int64_t from, int64_t to) {
  NoGradGuard no_grad;
  const int64_t D = proj.size(0) / from, in = proj.dim() == 2 ? proj.size(1) : 1;
  Shape out = proj.shape();
  out[0] = to * D;
  // [G0·D, in] -> [G, R, D, in], index 0 of R -> [G·D, in]
  return proj.reshape({to, from / to, D, in}).narrow(1, 0, 1).contiguous().reshape(out);
}

// The files LMTokenizer::save writes (tokenizer.model for SentencePiece only).
const char* const kTokenizerFiles[] = {"tokenizer.json", "tokenizer.model"};

// lm eval loads the tokenizer from the model file's directory: give `to` the
// checkpoint's when it has none, and refuse a different one already there.
void place_tokenizer(const fs::path& from, const fs::path& to) {
  if (fs::equivalent(from, to)) return;
  const bool present = fs::exists(to / kTokenizerFiles[0]);
  for (const char* name : kTokenizerFiles) {
    const fs::path src = from / name, dst = to / name;
    if (!fs::exists(src)) continue;
    if (!present) {
      write_file_atomic(dst.string(), read_file_bytes(src.string()));
    } else if (!fs::exists(dst) || read_file_bytes(src.string()) != read_file_bytes(dst.string())) {
      fail<IOError>("lm-convert-gqa", "{} holds another tokenizer than the checkpoint's {}; lm eval reads the one "
                    "beside the model file; hint: --to a file in another directory", to.string(), src.string());
    }
  }
}

}  // namespace

KvPool parse_kv_pool(const std::string& name) {
  if (name == "mean") return KvPool::mean;
  if (name == "first") return KvPool::first;
  fail<ValueError>("flags", "--pool must be mean or first, got '{}'; hint: mean is Ainslie et al.'s conversion, "
                   "first the control", name);
}

GroupedQueryGPT to_grouped_query_gpt(const GPTConfig& c, const TensorMap& state, int64_t kv_heads, KvPool pool) {
  const int64_t from = c.kv_head_count();
  if (kv_heads <= 0 || from % kv_heads != 0)
    fail<ValueError>("to_grouped_query_gpt", "--kv-heads {} must divide the model's K/V heads {} (heads {}); hint: "
                     "any divisor of {} converts a multi-head model", kv_heads, from, c.heads, c.heads);
  GroupedQueryGPT g{c, state};
  g.config.kv_heads = kv_heads;
  g.config.validate();
  for (int64_t i = 0; i < c.layers; ++i)
    for (const char* proj : {"k_proj", "v_proj"})
      for (const char* part : {"weight", "bias"}) {
        const std::string name = fmt::format("blocks.{}.attn.{}.{}", i, proj, part);
        auto it = g.state.find(name);
        if (it == g.state.end()) {
          if (std::string(part) == "bias") continue;  // a projection without a bias has nothing to pool
          fail<ValueError>("to_grouped_query_gpt", "the state lacks {}; hint: pass a GPT's state_dict with its config",
                           name);
        }
        it->second = pool == KvPool::mean ? mean_pool_kv_heads(it->second, from, kv_heads)
                                          : first_kv_head_of_each_group(it->second, from, kv_heads);
      }
  return g;
}

std::string convert_lm_to_grouped_query(const std::string& checkpoint, int64_t kv_heads, KvPool pool,
                                        const std::string& out) {
  if (!out.ends_with(".model.safetensors"))
    fail<ValueError>("flags", "--to {} must name a *.model.safetensors file (what lm loads as a checkpoint); hint: "
                     "--to {}.model.safetensors", out, out);
  if (checkpoint.empty()) fail<ValueError>("flags", "--checkpoint is required; hint: an lm --checkpoint-dir");
  const Checkpoint c = load_checkpoint(checkpoint, /*need_train_state=*/false, CheckpointReader{"head_probe", "lm"});
  // Built as lm builds it, so the weights are checked against the config first.
  const std::unique_ptr<GPT> model = gpt_from_checkpoint(c);
  const GPTConfig& from = model->config;
  const GroupedQueryGPT g = to_grouped_query_gpt(from, model->state_dict(), kv_heads, pool);
  const fs::path out_dir = fs::absolute(out).parent_path();
  fs::create_directories(out_dir);
  place_tokenizer(fs::absolute(c.model_path).parent_path(), out_dir);
  Metadata metadata = load_safetensors_metadata(c.model_path);
  metadata["config"] = g.config.to_json().dump();
  metadata["program"] = "head_probe";
  metadata.erase("run");  // a new model, of no training run
  save_model_file(out, g.state, metadata);
  return fmt::format("{}: H = {}, K/V heads {} -> {} (k_proj, v_proj {} per group of {}); KV cache {}x smaller; "
                     "wrote {}", c.model_path, from.heads, from.kv_head_count(), kv_heads,
                     pool == KvPool::mean ? "mean-pooled" : "first head kept", from.kv_head_count() / kv_heads,
                     from.kv_head_count() / kv_heads, out);
}

int lm_convert_gqa_main(int argc, char** argv) {
  cxxopts::Options opts(argv[0], "Convert a trained lm checkpoint to grouped-query attention (Ainslie et al. 2023), "
                        "for uptraining with lm train --init-from OUT --kv-heads G.");
  opts.add_options()
      ("checkpoint", "the lm checkpoint to convert (directory or model file)",
       cxxopts::value<std::string>()->default_value(""))
      ("kv-heads", "K/V heads G of the converted model (must divide the model's)", cxxopts::value<int64_t>())
      ("pool", "mean (Ainslie et al.) or first (each group's first head, a control)",
       cxxopts::value<std::string>()->default_value("mean"))
      ("to", "the *.model.safetensors file to write", cxxopts::value<std::string>()->default_value(""))
      ("h,help", "show this help");
  const cxxopts::ParseResult r = cli::parse_flags(opts, argc, argv);
  if (r.count("help")) {
    fmt::print("{}\n", opts.help());
    return 0;
  }
  if (!r.unmatched().empty()) fail<ValueError>("flags", "unexpected argument '{}'", r.unmatched()[0]);
  if (!r.count("kv-heads")) fail<ValueError>("flags", "--kv-heads is required; hint: --kv-heads 1 for multi-query");
  const KvPool pool = parse_kv_pool(r["pool"].as<std::string>());
  const std::string to = r["to"].as<std::string>();
  if (to.empty()) fail<ValueError>("flags", "--to is required; hint: --to DIR/gqa.model.safetensors");
  fmt::print("{}\n", convert_lm_to_grouped_query(r["checkpoint"].as<std::string>(), r["kv-heads"].as<int64_t>(), pool,
                                                 to));
  return 0;
}

}  // namespace attograd::app::probe
