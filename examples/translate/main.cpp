// translate: a tiny English -> French / German / Spanish translator of number
// words ("seventy-one thousand" -> "soixante et onze mille"), trained on the
// committed corpus data/numbers/ with the shared training loop.
//
//   translate train --lang fr|de|es [flags]          train on train.tsv, evaluate on valid.tsv, report test.tsv
//   translate eval  --checkpoint DIR [--split test]   loss, token accuracy, exact match, BLEU, chrF on a split
//   translate translate --checkpoint DIR "twenty-one" ...   (or one sentence per stdin line, or --input FILE)
//
// Sources are English words with hyphens split off; French and Spanish targets
// are words the same way, German targets are characters (data/parallel.h).
// Every source, from the corpus or typed, is first normalised to the corpus
// form (data/number_words.h): "Three thousand, four hundred" and "3400" read as
// "three thousand four hundred".
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include <attograd/autograd/io/safetensors.h>

#include <attograd/data/bleu.h>
#include <attograd/data/parallel.h>
#include "examples/common/attention_svg.h"
#include "examples/common/cli.h"
#include "examples/common/preflight.h"
#include "examples/common/trainer.h"
#include "examples/common/translation.h"

using namespace attograd;

namespace {

// The defaults are what `translate train --lang fr` trains (see docs/translate.md for the
// measured accuracy and time).
TransformerConfig default_model() {
  TransformerConfig c;
  c.d_model = 64;
  c.heads = 4;
  c.d_ff = 256;
  c.enc_layers = 2;
  c.dec_layers = 2;
  c.dropout = 0.0;
  c.max_len = 96;
  return c;
}

TrainOptions default_training() {
  TrainOptions t;
  t.program = "translate";
  // Measured (1 thread, shared machine): 2,000 steps reach 99.95% test exact
  // match in 9:51 wall / 117 s CPU under heavy load; a 2,000-step run is at
  // 98.75% after 1,000 steps, so 1,200 steps keep a wide margin on the 10 minutes
  // (measured with these defaults: 99.95% test exact match, 5:28 wall / 71 s CPU).
  t.steps = 1200;
  t.batch_size = 64;
  t.lr = 3e-3;
  t.schedule = "cosine";
  t.warmup = 200;
  t.eval_every = 400;
  t.eval_size = 2000;
  return t;
}

cxxopts::Options make_options(const std::string& mode) {
  cxxopts::Options o("translate " + mode, "Translate English number words into French, German or Spanish.\n"
                     "Modes: train (default), eval, translate.");
  o.add_options()("h,help", "show this help");
  if (mode != "translate")
    o.add_options("data")
        ("data", "corpus directory (train/valid/test/gen .tsv)",
         cxxopts::value<std::string>()->default_value(default_corpus_dir()));
  if (mode == "train") {
    o.add_options("data")("lang", "target language: fr, de or es", cxxopts::value<std::string>()->default_value("fr"));
    add_model_flags(o, default_model());
    add_train_flags(o, default_training());
    add_memory_flags(o);
    return o;
  }
  o.add_options("checkpoint")
      ("checkpoint", "checkpoint directory or .model.safetensors file", cxxopts::value<std::string>()->default_value(""))
      ("beam", "beam size (1: greedy)", cxxopts::value<int64_t>()->default_value("1"))
      ("length-penalty", "GNMT length penalty alpha for beam search (0: rank by log-probability)",
       cxxopts::value<double>()->default_value("0.6"))
      ("max-len", "longest output in target tokens (0: as long as the model allows)",
       cxxopts::value<int64_t>()->default_value("0"))
      ("threads", "compute threads (default: the cores this process may use; results are the same for any count)",
       cxxopts::value<int>()->default_value(std::to_string(cli::usable_cores())));
  if (mode == "eval") {
    o.add_options("data")
        ("split", "train, valid, test, gen, or a path to a TSV file with en and target columns",
         cxxopts::value<std::string>()->default_value("test"))
        ("eval-size", "sentences to evaluate (the first N of the split)", cxxopts::value<int64_t>()->default_value("1000000"))
        ("samples", "wrong translations to show", cxxopts::value<int64_t>()->default_value("5"));
  } else {
    o.add_options("input")
        ("input", "read sentences from this file, one per line (as from stdin); a blank line gives an empty output "
         "line, so output line N translates input line N", cxxopts::value<std::string>()->default_value(""))
        ("attention-out", "write attention heatmaps (SVG) and index.html for the one sentence to this directory",
         cxxopts::value<std::string>()->default_value(""));
    o.positional_help("[sentences...]");
  }
  return o;
}

void show_samples(const Translator& tr, const EvalResult& e, int64_t n, bool wrong_only) {
  int64_t shown = 0;
  for (size_t i = 0; i < e.outputs.size() && shown < n; ++i) {
    const bool ok = e.outputs[i] == e.references[i];
    if (wrong_only && ok) continue;
    fmt::print("  {}  ->  {}   {}\n", tr.show_source(e.sources[i]), tr.show_target(e.outputs[i]),
               ok ? "correct" : "WRONG (expected " + tr.show_target(e.references[i]) + ")");
    ++shown;
  }
}

int train(const cxxopts::ParseResult& r) {
  TrainOptions opt = train_options_from(r, default_training());
  TransformerConfig cfg = model_config_from(r, default_model());
  const TranslationTask task = TranslationTask::for_language(r["lang"].as<std::string>());
  check_outputs_writable(opt);
  const std::string data_dir = r["data"].as<std::string>();
  const ParallelText train_text = read_split(data_dir, "train", task.lang);
  const ParallelText valid_text = read_split(data_dir, "valid", task.lang);
  const ParallelText test_text = read_split(data_dir, "test", task.lang);
  const std::string kernel = configure_threads(opt.threads);

  const Translator tr = Translator::from_training_text(task, train_text);
  cfg.src_vocab = tr.src_vocab.size();
  cfg.tgt_vocab = tr.tgt_vocab.size();
  const VectorDataset train_set = tr.encode(train_text), valid_set = tr.encode(valid_text), test_set = tr.encode(test_text);
  const int64_t longest = longest_sequence({&train_set, &valid_set, &test_set});
  if (longest + 2 > cfg.max_len)
    fail<ValueError>("flags", "the corpus has sequences of {} tokens, which need --max-len >= {} (sequence + BOS/EOS)",
                     longest, longest + 2);
  const std::string memory = check_training_memory(r, cfg, opt, longest + 1, longest + 1);

  Generator init_gen(opt.seed);
  auto dropout_gen = std::make_shared<Generator>(mix_seed(opt.seed, 0xd50u));
  Seq2SeqTransformer model(cfg, init_gen, dropout_gen);
  LoaderOptions lo;
  lo.batch_size = opt.batch_size;
  lo.shuffle = true;
  lo.seed = opt.seed;
  DataLoader loader(train_set, lo);

  fmt::print("translate: en -> {} ({} target tokens) | {} training pairs, vocab {} / {} | model {} parameters "
             "(d_model {}, {}, {}+{} layers) | {} | {} thread(s), BLAS kernel {}\n",
             task.lang, task.tgt_tokenizer == "char" ? "character" : "word", train_set.size(), tr.src_vocab.size(),
             tr.tgt_vocab.size(), model.num_parameters(), cfg.d_model, heads_summary(cfg), cfg.enc_layers, cfg.dec_layers,
             memory, opt.threads, kernel);

  TrainSummary s = train_seq2seq(model, dropout_gen, loader, valid_set, opt, tr.hooks());
  if (s.trained > 0)
    fmt::print("done: {} steps in {} ({:.1f} s), final loss {:.4f}\n", s.steps, cli::format_duration(s.seconds),
               s.seconds, s.final_loss);
  fmt::print("valid ({} sentences): {}\n", s.last_eval.examples, metrics_line(s.last_eval));
  EvalOptions eo;
  eo.max_examples = test_set.size();
  EvalResult test = evaluate(model, test_set, eo);
  tr.add_metrics(test);
  fmt::print("test ({} sentences): {}\n", test.examples, metrics_line(test));
  if (opt.samples > 0) {
    fmt::print("sample translations (test):\n");
    show_samples(tr, test, opt.samples, false);
  }
  return 0;
}

DecodeOptions decode_options(const cxxopts::ParseResult& r, const Seq2SeqTransformer& model) {
  DecodeOptions d;
  const int64_t limit = model.config.max_len - 1;
  const int64_t max_len = cli::flag_in_range<int64_t>(r, "max-len", 0, 1 << 16);
  if (max_len > limit)
    fail<ValueError>("flags", "--max-len {} exceeds what the model allows ({} tokens)", max_len, limit);
  d.max_len = max_len > 0 ? max_len : limit;
  return d;
}

int eval(const cxxopts::ParseResult& r) {
  configure_threads(cli::flag_in_range<int>(r, "threads", 1, 256));
  const int64_t n = cli::flag_in_range<int64_t>(r, "eval-size", 1, 1'000'000'000);
  const int64_t beam = cli::flag_in_range<int64_t>(r, "beam", 1, 64);
  const double alpha = cli::flag_in_range<double>(r, "length-penalty", 0.0, 10.0);
  const int64_t samples = cli::flag_in_range<int64_t>(r, "samples", 0, 1000);
  const int64_t max_len = cli::flag_in_range<int64_t>(r, "max-len", 0, 1 << 16);
  TrainedTranslator l = load_translator(r["checkpoint"].as<std::string>());
  const std::string split = r["split"].as<std::string>();
  const ParallelText text = read_split(r["data"].as<std::string>(), split, l.tr.task.lang);
  if (text.size() == 0) fail<ValueError>("eval", "{} has no sentence pairs", text.name);
  const VectorDataset data = l.tr.encode(text);
  for (const Example& e : data.examples())
    if (static_cast<int64_t>(std::max(e.src.size(), e.tgt.size())) + 2 > l.model->config.max_len)
      fail<ValueError>("eval", "{} has a sentence of {} tokens; the model accepts at most {}", text.name,
                       std::max(e.src.size(), e.tgt.size()), l.model->config.max_len - 2);
  EvalOptions eo;
  eo.max_examples = n;
  eo.beam = beam;
  eo.length_penalty = alpha;
  eo.max_decode_len = max_len > 0 ? decode_options(r, *l.model).max_len : 0;
  EvalResult e = evaluate(*l.model, data, eo);
  l.tr.add_metrics(e);
  fmt::print("{} ({} sentences, en -> {}, {}): {}\n", split, e.examples, l.tr.task.lang,
             beam > 1 ? fmt::format("beam {}, length penalty {}", beam, alpha) : std::string("greedy"), metrics_line(e));
  if (samples > 0 && e.exact_match < 1) {
    fmt::print("wrong translations:\n");
    show_samples(l.tr, e, samples, true);
  }
  return 0;
}

// Standard input up to max_bytes. A device other than a terminal (< /dev/zero) is refused, as read_file_bytes refuses one.
std::string read_stdin(uint64_t max_bytes) {
  struct stat st {};
  if (::fstat(STDIN_FILENO, &st) == 0 && S_ISCHR(st.st_mode) && !::isatty(STDIN_FILENO))
    fail<IOError>("translate", "standard input is a character device, expected a file, a pipe or a terminal; hint: "
                  "pass sentences as arguments, one per line on stdin, or --input FILE");
  std::string text;
  char chunk[1 << 16];
  while (const size_t n = std::fread(chunk, 1, sizeof chunk, stdin)) {
    if (text.size() + n > max_bytes)
      fail<IOError>("translate", "standard input is longer than {} bytes; hint: pass fewer sentences at once", max_bytes);
    text.append(chunk, n);
  }
  if (std::ferror(stdin)) fail<IOError>("translate", "cannot read standard input: {}", std::strerror(errno));
  return text;
}

// The text's lines, without "\n" (or "\r\n"); a last line without its "\n" counts.
std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    if (line.ends_with('\r')) line.remove_suffix(1);
    lines.emplace_back(line);
    pos = end + 1;
  }
  return lines;
}

std::vector<std::string> input_lines(const cxxopts::ParseResult& r, const std::vector<std::string>& sentences) {
  const std::string file = r["input"].as<std::string>();
  if (!file.empty() && !sentences.empty())
    fail<ValueError>("flags", "give sentences either as arguments or with --input, not both");
  if (!sentences.empty()) return sentences;
  if (!file.empty()) {
    std::vector<std::string> lines = split_lines(read_file_bytes(file, text_input_limit()));
    if (lines.empty()) fail<ValueError>("translate", "--input {} is empty", file);
    return lines;
  }
  std::vector<std::string> lines = split_lines(read_stdin(text_input_limit()));
  if (lines.empty())
    fail<ValueError>("translate", "no input; hint: pass sentences as arguments, one per line on stdin, or --input FILE");
  return lines;
}

// Nothing but whitespace: translated as an empty line.
bool is_blank(std::string_view line) { return line.find_first_not_of(" \t\r\v\f") == std::string_view::npos; }

// The line's source ids, empty for a blank line; warns of unknown words (shown escaped, as fmt's "{:?}").
std::vector<int64_t> encode_line(const Translator& tr, const std::string& line, int64_t number, int64_t max_len) {
  if (is_blank(line)) return {};
  std::vector<std::string> unknown;
  std::vector<int64_t> ids = tr.encode_input(line, number, unknown);
  for (std::string& w : unknown) w = fmt::format("{:?}", w);
  if (!unknown.empty())
    fmt::print(stderr, "translate: warning: line {}: unknown word{} {} read as <unk>\n", number,
               unknown.size() > 1 ? "s" : "", fmt::join(unknown, ", "));
  if (static_cast<int64_t>(ids.size()) + 2 > max_len)
    fail<ValueError>("translate", "input line {} has {} tokens; the model accepts at most {}", number, ids.size(),
                     max_len - 2);
  return ids;
}

int translate(const cxxopts::ParseResult& r, const std::vector<std::string>& sentences) {
  configure_threads(cli::flag_in_range<int>(r, "threads", 1, 256));
  const int64_t beam = cli::flag_in_range<int64_t>(r, "beam", 1, 64);
  const double alpha = cli::flag_in_range<double>(r, "length-penalty", 0.0, 10.0);
  const std::string attention_dir = r["attention-out"].as<std::string>();
  if (!attention_dir.empty()) check_dir_writable(attention_dir, "attention-out");
  TrainedTranslator l = load_translator(r["checkpoint"].as<std::string>());
  const DecodeOptions d = decode_options(r, *l.model);
  const std::vector<std::string> lines = input_lines(r, sentences);
  if (!attention_dir.empty() && lines.size() != 1)
    fail<ValueError>("flags", "--attention-out draws one sentence, got {}", lines.size());

  // Check every line before printing anything, so a bad line leaves no partial output.
  std::vector<std::vector<int64_t>> sources;
  for (size_t i = 0; i < lines.size(); ++i)
    sources.push_back(encode_line(l.tr, lines[i], static_cast<int64_t>(i) + 1, l.model->config.max_len));
  if (std::all_of(sources.begin(), sources.end(), [](const auto& ids) { return ids.empty(); }))
    fail<ValueError>("translate", "no sentence to translate: {} blank line{}", lines.size(), lines.size() > 1 ? "s" : "");
  for (const auto& ids : sources) {
    if (ids.empty()) {
      fmt::print("\n");
      continue;
    }
    std::vector<int64_t> src_ids = ids;
    src_ids.push_back(kEosId);
    Tensor src = Tensor::from_vector(src_ids, {1, static_cast<int64_t>(src_ids.size())});
    auto hyps = beam > 1 ? beam_search(*l.model, src, Tensor(), d, {beam, alpha}) : greedy_decode(*l.model, src, Tensor(), d);
    fmt::print("{}\n", l.tr.show_target(hyps[0].tokens));
    if (!attention_dir.empty()) {
      const AttentionPictures pics = draw_attention(*l.model, l.tr.src_vocab.decode(src_ids), src,
                                                    hyps[0].tokens, l.tr.tgt_vocab);
      write_attention_pictures(pics, attention_dir, lines[0], l.tr.show_target(hyps[0].tokens));
      fmt::print(stderr, "translate: wrote {} attention heatmaps and index.html to {}\n", pics.maps.size(), attention_dir);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::guarded_main("translate", [&] {
    const auto parsed = cli::parse_mode_and_flags(argc, argv, {"train", "eval", "translate"},
                                                   "train, eval or translate", make_options);
    if (!parsed) return 0;
    const auto& [mode, result, inputs] = *parsed;
    if (mode != "translate" && !inputs.empty())
      fail<ValueError>("flags", "unexpected argument '{}' for mode {}", inputs[0], mode);
    if (mode == "train") return train(result);
    if (mode == "eval") return eval(result);
    return translate(result, inputs);
  });
}
