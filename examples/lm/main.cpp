// lm: train a GPT-style language model on a text file of your own, sample
// from it, and measure its perplexity (docs/lm.md).
//
//   lm train  [--text FILE] [--tokenizer char|bpe|unigram] [--vocab-size N] [flags]
//   lm sample --checkpoint DIR [--prompt TEXT] [--temperature 0.8] [--top-k K] [--top-p P] [--seed S] [--max-len N]
//   lm eval   --checkpoint DIR [--text FILE]     held-out loss, perplexity and bits per character
//
// train runs the shared training loop (examples/common/trainer.h), so under
// mpirun it trains data-parallel. Without --text, train reads the fortune cookies of Debian's fortunes and
// fortunes-min packages (/usr/share/games/fortunes, BSD licence).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include <attograd/autograd/io/safetensors.h>
#include <attograd/data/lm_tokenizer.h>
#include <attograd/data/token_windows.h>
#include <attograd/dist/communicator.h>
#include <attograd/nn/gpt.h>
#include "examples/common/attention_svg.h"
#include "examples/common/checkpoint.h"
#include "examples/common/checkpoint_model.h"
#include "examples/common/cli.h"
#include "examples/common/preflight.h"
#include "examples/common/trainer.h"
#include "examples/lm/lm_checkpoint.h"
#include "examples/lm/lm_task.h"
#include "examples/lm/sampling.h"

using namespace attograd;
using namespace attograd::app;

namespace {

// About 0.8M parameters with a char vocabulary, context 128.
GPTConfig default_model() {
  GPTConfig c;
  c.context = 128;
  c.d_model = 128;
  c.heads = 4;
  c.d_ff = 512;
  c.layers = 4;
  c.init = GPTInit::gpt2;
  return c;
}

// About 10 minutes on one thread (docs/lm.md has the measured run).
TrainOptions default_training() {
  TrainOptions t;
  t.program = "lm";
  t.steps = 600;
  t.batch_size = 32;
  t.lr = 3e-3;
  t.warmup = 60;
  t.min_lr = 1e-4;
  t.weight_decay = 0.1;
  t.eval_every = 200;
  t.eval_size = 200;  // held-out windows
  t.samples = 1;
  return t;
}

cxxopts::Options make_options(const std::string& mode) {
  cxxopts::Options o("lm " + mode, "Train a GPT-style language model on a text, sample from it, measure it.\n"
                     "Modes: train (default), sample, eval.");
  const GPTConfig m = default_model();
  o.add_options("data")
      ("text", "UTF-8 text file (train: default the fortunes in " + std::string(kFortunesDir) +
       "; eval: default the checkpoint's training file)", cxxopts::value<std::string>()->default_value(""))
      ("tokenizer", "char (code points), bpe or unigram (SentencePiece)", cxxopts::value<std::string>()->default_value("char"))
      ("vocab-size", "vocabulary size (char: 0 keeps every character; bpe/unigram: default 1000)",
       cxxopts::value<int64_t>()->default_value("0"))
      ("heldout", "fraction of the text, at its end, held out for evaluation", cxxopts::value<double>()->default_value("0.1"));
  o.add_options("model")
      ("context", "context length T (tokens the model sees)", cxxopts::value<int64_t>()->default_value(std::to_string(m.context)))
      ("d-model", "model width E", cxxopts::value<int64_t>()->default_value(std::to_string(m.d_model)))
      ("heads", "attention heads (must divide d-model)", cxxopts::value<int64_t>()->default_value(std::to_string(m.heads)))
      ("kv-heads", "key/value heads G (grouped-query attention; must divide --heads; default: --heads, multi-head; "
       "1: multi-query). The KV cache of sampling shrinks by heads/G", cxxopts::value<int64_t>())
      ("no-causal", "drop the causal mask, so every position sees every other: a control only, since position t "
       "then reads its own target (token t + 1) and the loss collapses; sampling runs the whole window per token")
      ("d-ff", "MLP width", cxxopts::value<int64_t>()->default_value(std::to_string(m.d_ff)))
      ("layers", "Transformer blocks", cxxopts::value<int64_t>()->default_value(std::to_string(m.layers)))
      ("dropout", "dropout probability", cxxopts::value<double>()->default_value("0"))
      ("positions", "learned or sinusoidal", cxxopts::value<std::string>()->default_value("learned"))
      ("untied", "a separate output matrix instead of the token embedding")
      ("init", "gpt2 (N(0, 0.02), scaled residual projections) or pytorch (module defaults)",
       cxxopts::value<std::string>()->default_value("gpt2"));
  o.add_options("sample")
      ("checkpoint", "checkpoint directory (sample, eval)", cxxopts::value<std::string>()->default_value(""))
      ("prompt", "text to continue (default: a line break)", cxxopts::value<std::string>()->default_value(""))
      ("temperature", "softmax temperature (0: the most likely token)", cxxopts::value<double>()->default_value("0.8"))
      ("top-k", "sample among the k most likely tokens (0: all)", cxxopts::value<int64_t>()->default_value("0"))
      ("top-p", "sample among the most likely tokens holding this probability (1: all)",
       cxxopts::value<double>()->default_value("1"))
      ("max-len", "new tokens to generate", cxxopts::value<int64_t>()->default_value("300"))
      ("attention-out", "write causal self-attention heatmaps (SVG, one per layer and head) and index.html of the "
       "prompt and the sampled text (its last --context tokens) to this directory",
       cxxopts::value<std::string>()->default_value(""));
  o.add_options()("h,help", "show this help");
  add_train_flags(o, default_training());
  add_memory_flags(o);
  return o;
}

GPTConfig model_from(const cxxopts::ParseResult& r) {
  GPTConfig c = default_model();
  c.context = cli::flag_in_range<int64_t>(r, "context", 1, 1 << 16);
  c.d_model = cli::flag_in_range<int64_t>(r, "d-model", 1, 1 << 14);
  c.heads = cli::flag_in_range<int64_t>(r, "heads", 1, 1 << 10);
  if (r.count("kv-heads")) {
    c.kv_heads = cli::flag_in_range<int64_t>(r, "kv-heads", 1, 1 << 10);
    if (c.heads % *c.kv_heads != 0)
      fail<ValueError>("flags", "--kv-heads {} must divide --heads {}; hint: {} is multi-head, 1 multi-query attention",
                       *c.kv_heads, c.heads, c.heads);
  }
  c.causal = r.count("no-causal") == 0;
  c.d_ff = cli::flag_in_range<int64_t>(r, "d-ff", 1, 1 << 16);
  c.layers = cli::flag_in_range<int64_t>(r, "layers", 1, 64);
  c.dropout = cli::flag_in_range<double>(r, "dropout", 0.0, 0.99);
  const std::string pos = r["positions"].as<std::string>();
  if (pos != "learned" && pos != "sinusoidal")
    fail<ValueError>("flags", "--positions must be learned or sinusoidal, got '{}'", pos);
  c.positions = pos == "learned" ? PositionalEncoding::Kind::learned : PositionalEncoding::Kind::sinusoidal;
  c.tie_embeddings = r.count("untied") == 0;
  const std::string init = r["init"].as<std::string>();
  if (init != "gpt2" && init != "pytorch") fail<ValueError>("flags", "--init must be gpt2 or pytorch, got '{}'", init);
  c.init = init == "gpt2" ? GPTInit::gpt2 : GPTInit::pytorch;
  c.validate();
  return c;
}

// "4 heads", "4 heads, 1 K/V head", and the missing causal mask called out.
std::string attention_summary(const GPTConfig& c) {
  std::string s = fmt::format("{} heads", c.heads);
  if (c.kv_head_count() != c.heads) s += fmt::format(", {} K/V head{}", c.kv_head_count(), c.kv_head_count() == 1 ? "" : "s");
  if (!c.causal) s += ", no causal mask (a control: the loss collapses)";
  return s;
}

// Cross-entropy of the held-out tokens under the training part's token
// frequencies (add-one smoothed): the loss a model without context reaches.
double unigram_baseline(const TokenWindows& w, int64_t vocab) {
  std::vector<double> count(static_cast<size_t>(vocab), 1.0);
  const auto& ids = w.ids();
  for (int64_t i = 0; i < w.train_tokens(); ++i) count[ids[i]] += 1;
  const double total = static_cast<double>(w.train_tokens() + vocab);
  double nats = 0;
  for (size_t i = static_cast<size_t>(w.train_tokens()); i < ids.size(); ++i) nats -= std::log(count[ids[i]] / total);
  return nats / static_cast<double>(w.heldout_tokens());
}

// Prints each token's text as it is drawn (a subword's text may only be
// known once the next arrives, so the decoded whole is compared with what was printed).
class Streamer {
 public:
  explicit Streamer(const LMTokenizer& tok) : tok_(tok) {}
  void operator()(int32_t id) {
    ids_.push_back(id);
    const std::string text = tok_.decode(ids_);
    if (text.size() > printed_.size() && text.starts_with(printed_)) {
      std::fwrite(text.data() + printed_.size(), 1, text.size() - printed_.size(), stdout);
      std::fflush(stdout);
      printed_ = text;
    }
  }

 private:
  const LMTokenizer& tok_;
  std::vector<int32_t> ids_;
  std::string printed_;
};

// Prints the prompt and its continuation; returns the continuation's ids.
std::vector<int32_t> print_sample(GPT& model, const LMTokenizer& tok, const std::vector<int32_t>& prompt,
                                  const SampleOptions& so, uint64_t seed) {
  Generator gen(seed);
  const std::string shown = tok.decode(prompt);
  std::fwrite(shown.data(), 1, shown.size(), stdout);
  Streamer stream(tok);
  std::vector<int32_t> drawn = generate(model, prompt, so, gen, std::ref(stream));
  std::fputs("\n", stdout);
  std::fflush(stdout);
  return drawn;
}

// The attention of every block and head over the last context tokens of ids,
// each labelled with its text (a line break shown as \n).
void write_lm_attention(GPT& model, const LMTokenizer& tok, std::vector<int32_t> ids, const std::string& dir) {
  const auto context = static_cast<size_t>(model.config.context);
  if (ids.size() > context) ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(context));
  std::vector<std::string> labels;
  for (int32_t id : ids) {
    std::string text = tok.decode(std::vector<int32_t>{id});
    for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 2)) text.replace(at, 1, "\\n");
    labels.push_back(text);
  }
  const Tensor input = Tensor::from_vector(std::vector<int64_t>(ids.begin(), ids.end()),
                                           {1, static_cast<int64_t>(ids.size())});
  const AttentionPictures pics = draw_lm_attention(model, labels, input);
  write_attention_pictures(pics, dir, tok.decode(ids), "");
  fmt::print(stderr, "lm: wrote {} attention heatmaps and index.html to {}\n", pics.maps.size(), dir);
}

// The text's absolute path, so that `lm eval` finds it from any directory.
nlohmann::json task_json(const cxxopts::ParseResult& r, const std::string& data, const LMTokenizer& tok, double heldout) {
  const std::string where =
      data.empty() ? std::string("fortunes") : std::filesystem::absolute(data).lexically_normal().string();
  return {{"task", "lm"}, {"data", where}, {"tokenizer", tok.kind()},
          {"vocab_size", tok.vocab_size()}, {"heldout", heldout}, {"seed", r["seed"].as<uint64_t>()}};
}

int train(const cxxopts::ParseResult& r) {
  TrainOptions opt = train_options_from(r, default_training());
  GPTConfig cfg = model_from(r);
  const double heldout = cli::flag_in_range<double>(r, "heldout", 1e-6, 0.5);
  LMTokenizerOptions to;
  to.kind = r["tokenizer"].as<std::string>();
  to.vocab_size = cli::flag_in_range<int64_t>(r, "vocab-size", 0, 1 << 20);
  if (to.vocab_size == 0 && to.kind != "char") to.vocab_size = 1000;
  check_outputs_writable(opt);
  {
    // Before the text is read, with the vocabulary the flags give (char: at least 1 token); again once it is known.
    GPTConfig at_least = cfg;
    at_least.vocab = std::max<int64_t>(to.vocab_size, 1);
    check_training_memory(r, at_least, opt);
  }
  claim_checkpoint_dir(opt);  // before the directory's tokenizer is read or written

  const std::string path = r["text"].as<std::string>();
  std::unique_ptr<LMTokenizer> tok;
  std::unique_ptr<TokenWindows> data;
  {
    const std::string text = read_lm_text(path);
    // A foreign checkpoint is named before its directory's tokenizer is looked for.
    if (opt.resume) load_checkpoint(opt.checkpoint_dir, /*need_train_state=*/true, CheckpointReader{"lm", "lm"});
    if (opt.resume) tok = load_lm_tokenizer(opt.checkpoint_dir);
    else tok = train_lm_tokenizer(text, to);
    data = std::make_unique<TokenWindows>(tok->encode(text), cfg.context, heldout);
  }
  cfg.vocab = tok->vocab_size();
  const std::string memory = check_training_memory(r, cfg, opt);
  if (!opt.checkpoint_dir.empty() && !opt.resume && dist::world().rank() == 0) tok->save(opt.checkpoint_dir);

  Generator init_gen(opt.seed);
  auto data_gen = std::make_shared<Generator>(mix_seed(opt.seed, 0xda7au));
  auto dropout_gen = std::make_shared<Generator>(mix_seed(opt.seed, 0xd50u));
  GPT model(cfg, init_gen, dropout_gen);
  fmt::print("lm: {} | {} tokens ({} train, {} held out), tokenizer {} with {} tokens | model {} parameters "
             "({} layers, d_model {}, {}, context {}) | {} | {}\n",
             path.empty() ? std::string("fortunes") : path, data->ids().size(), data->train_tokens(),
             data->heldout_tokens(), tok->kind(), tok->vocab_size(), model.num_parameters(), cfg.layers, cfg.d_model,
             attention_summary(cfg), cfg.context, memory, cli::compute_summary());
  fmt::print("unigram baseline: held-out loss {:.4f}\n", unigram_baseline(*data, cfg.vocab));
  std::fflush(stdout);

  LMTask task(model, *data, *tok, opt.batch_size, data_gen, dropout_gen, task_json(r, path, *tok, heldout));
  const RunSummary s = app::train(task, opt);
  if (s.stopped_early) return 0;
  if (s.trained == 0) fmt::print("held-out at step {}: {}\n", s.steps, eval_summary(task.last_eval()));
  else
    fmt::print("done: {} steps in {} ({:.1f} s); held-out {}\n", s.steps, cli::format_duration(s.seconds), s.seconds,
               eval_summary(task.last_eval()));
  if (opt.samples > 0) {
    fmt::print("sample:\n");
    print_sample(model, *tok, tok->encode("\n"), SampleOptions{}, opt.seed);
  }
  return 0;
}

int sample(const cxxopts::ParseResult& r) {
  SampleOptions so;
  so.temperature = cli::flag_in_range<double>(r, "temperature", 0.0, 100.0);
  so.top_k = cli::flag_in_range<int64_t>(r, "top-k", 0, int64_t{1} << 31);
  so.top_p = cli::flag_in_range<double>(r, "top-p", 1e-9, 1.0);
  so.max_new = cli::flag_in_range<int64_t>(r, "max-len", 0, int64_t{1} << 31);
  const std::string attention_dir = r["attention-out"].as<std::string>();
  if (!attention_dir.empty()) check_dir_writable(attention_dir, "attention-out");
  LoadedLM l = load_lm_checkpoint(r["checkpoint"].as<std::string>());
  const std::string text = r["prompt"].as<std::string>();
  const std::vector<int32_t> prompt = l.tokenizer->encode(text.empty() ? "\n" : text);
  std::vector<int32_t> all = prompt;
  const std::vector<int32_t> drawn = print_sample(*l.model, *l.tokenizer, prompt, so, r["seed"].as<uint64_t>());
  all.insert(all.end(), drawn.begin(), drawn.end());
  if (!attention_dir.empty()) write_lm_attention(*l.model, *l.tokenizer, all, attention_dir);
  return 0;
}

int eval(const cxxopts::ParseResult& r) {
  const int64_t batch = cli::flag_in_range<int64_t>(r, "batch-size", 1, 1 << 16);
  const int64_t windows = r.count("eval-size") ? cli::flag_in_range<int64_t>(r, "eval-size", 1, 10'000'000) : 0;
  LoadedLM l = load_lm_checkpoint(r["checkpoint"].as<std::string>());
  const LMHeldOut h = lm_heldout(l, r["text"].as<std::string>());
  const LMEval e = evaluate_lm(*l.model, h.windows, *l.tokenizer, windows, batch, dist::world());
  fmt::print("held-out ({}, last {:.0f}%): {}\n", h.shown, 100 * h.heldout, eval_summary(e));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::guarded_main("lm", [&] {
    const auto parsed = cli::parse_mode_and_flags(argc, argv, {"train", "sample", "eval"}, "train, sample or eval",
                                                   make_options);
    if (!parsed) return 0;
    const auto& [mode, result, inputs] = *parsed;
    if (!inputs.empty()) fail<ValueError>("flags", "unexpected argument '{}' for mode {}", inputs[0], mode);
    if (mode == "train") return train(result);
    if (mode == "sample") return sample(result);
    return eval(result);
  });
}
