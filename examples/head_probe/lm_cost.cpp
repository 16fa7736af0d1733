#include "examples/head_probe/lm_cost.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>

#include <fmt/format.h>

#include <attograd/autograd/backend/allocator.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/nn/config_sizes.h>
#include <attograd/nn/gpt.h>
#include "examples/common/checkpoint.h"
#include "examples/common/checkpoint_model.h"
#include "examples/common/cli.h"

namespace attograd::app::probe {

namespace {

using Clock = std::chrono::steady_clock;

// The processor's name as /proc/cpuinfo gives it ("unknown" elsewhere), so a
// timing is never read without the machine it was taken on.
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) {
      const size_t colon = line.find(':');
      const size_t first = line.find_first_not_of(" \t", colon + 1);
      return first == std::string::npos ? "unknown" : line.substr(first);
    }
  return "unknown";
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// For its lifetime new storage comes from a fresh allocator, whose
// high-water mark is then what was allocated since it was made (the
// library's counter has no reset).
class FreshAllocator {
 public:
  FreshAllocator() : saved_(current_allocator()), fresh_(make_caching_allocator()) { set_allocator(fresh_); }
  ~FreshAllocator() { set_allocator(saved_); }
  FreshAllocator(const FreshAllocator&) = delete;
  FreshAllocator& operator=(const FreshAllocator&) = delete;
  size_t peak_bytes() const { return fresh_->peak_bytes(); }

 private:
  std::shared_ptr<Allocator> saved_, fresh_;
};

// The token of row b at step i: any fixed ids do, timing not depending on them.
int64_t token_at(int64_t b, int64_t i, int64_t vocab) { return (7 * i + 3 * b + 1) % vocab; }

// ids [B] of step i.
std::vector<int64_t> step_ids(int64_t B, int64_t i, int64_t vocab) {
  std::vector<int64_t> ids(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) ids[static_cast<size_t>(b)] = token_at(b, i, vocab);
  return ids;
}

// Decodes t tokens for B rows from an empty cache, one decode_step each, as
// lm's sampler does (a fresh cache packs the weights on its first step);
// returns the cache. Needs eval mode and grad off.
KVCache decode_cached(GPT& m, int64_t B, int64_t t) {
  KVCache cache = m.make_cache();
  for (int64_t i = 0; i < t; ++i) m.decode_step(step_ids(B, i, m.config.vocab), cache);
  return cache;
}

// The t tokens without a cache: token i runs the graph over tokens 0..i.
void decode_uncached(GPT& m, int64_t B, int64_t t) {
  std::vector<int64_t> all;
  for (int64_t i = 1; i <= t; ++i) {
    all.resize(static_cast<size_t>(B * i));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < i; ++j) all[static_cast<size_t>(b * i + j)] = token_at(b, j, m.config.vocab);
    m.forward(Tensor::from_vector(all, {B, i}));  // [B, i, V]; the sampler reads the last row
  }
}

// The CPU time this process has used, all threads, in milliseconds.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// The time per token of `decode` over t tokens: one warm-up, then the medians of repeats.
template <class F>
TokenTime time_per_token(int64_t repeats, int64_t t, F&& decode) {
  decode();
  std::vector<double> wall, cpu;
  const auto per_token = [&](double ms) { return ms / static_cast<double>(t); };
  for (int64_t r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    const double c0 = process_cpu_ms();
    decode();
    cpu.push_back(per_token(process_cpu_ms() - c0));
    wall.push_back(per_token(std::chrono::duration<double, std::milli>(Clock::now() - t0).count()));
  }
  return {median(std::move(wall)), median(std::move(cpu))};
}

// A model of shape c with context t: random weights, or `trained`'s (whose
// learned position rows past its own context repeat its last row: timing does
// not depend on the values, and a trained model may be timed past its context).
std::unique_ptr<GPT> model_at(GPTConfig c, int64_t t, const GPT* trained) {
  c.context = t;
  c.dropout = 0;
  Generator gen(1);
  auto m = std::make_unique<GPT>(c, gen);
  if (trained) {
    NoGradGuard no_grad;
    TensorMap state = trained->state_dict();
    if (c.positions == PositionalEncoding::Kind::learned) {  // sinusoids are no state: the new model's, t rows long
      const Tensor& old = trained->pos->table;  // [context, E]
      Tensor table = m->pos->table.clone();     // [t, E]
      const int64_t n = std::min(t, old.size(0));
      table.narrow(0, 0, n).copy_(old.narrow(0, 0, n));
      for (int64_t i = n; i < t; ++i) table.narrow(0, i, 1).copy_(old.narrow(0, n - 1, 1));
      state.at("pos.weight") = table;
    }
    m->load_state_dict(state);
  }
  m->eval();
  return m;
}

LmCostRow measure_cached(const LmCostOptions& o, const GPTConfig& c, int64_t t, const GPT* trained) {
  const std::unique_ptr<GPT> m = model_at(c, t, trained);
  NoGradGuard no_grad;
  const int64_t B = o.batch, L = c.layers, G = c.kv_head_count(), D = c.d_model / c.heads;
  LmCostRow row;
  row.heads = c.heads;
  row.kv_heads = G;
  row.t = t;
  row.per_token = time_per_token(o.repeats, t, [&] { decode_cached(*m, B, t); });
  {
    const FreshAllocator fresh;
    const KVCache cache = decode_cached(*m, B, t);
    row.kv_bytes_used = cache.bytes_used();
    row.kv_bytes_allocated = cache.bytes_allocated();
    row.peak_bytes = fresh.peak_bytes();
  }
  row.kv_bytes_formula = static_cast<size_t>(2 * L * B * t * G * D) * sizeof(float);
  if (row.kv_bytes_used != row.kv_bytes_formula)
    fail<Error>("lm-cost", "the cache holds {} bytes at H = {}, G = {}, t = {}, but 2·L·B·t·G·D·4 = {}",
                row.kv_bytes_used, c.heads, G, t, row.kv_bytes_formula);
  return row;
}

LmUncachedRow measure_uncached(const LmCostOptions& o, const GPTConfig& c, int64_t t, const GPT* trained) {
  const std::unique_ptr<GPT> m = model_at(c, t, trained);
  NoGradGuard no_grad;
  return {c.heads, c.kv_head_count(), t, time_per_token(o.repeats, t, [&] { decode_uncached(*m, o.batch, t); })};
}

// The study's model (its width, MLP, depth, vocabulary) with H heads and G K/V heads.
GPTConfig grid_config(const LmCostOptions& o, int64_t H, int64_t G) {
  GPTConfig c;
  c.vocab = o.vocab;
  c.d_model = o.d_model;
  c.heads = H;
  c.kv_heads = G;
  c.d_ff = o.d_ff;
  c.layers = o.layers;
  c.init = GPTInit::gpt2;
  return c;
}

std::vector<int64_t> int_list(const cxxopts::ParseResult& r, const char* flag, int64_t lo, int64_t hi) {
  const auto v = r[flag].as<std::vector<int64_t>>();
  if (v.empty()) fail<ValueError>("flags", "--{} needs at least one value", flag);
  for (int64_t x : v)
    if (x < lo || x > hi) fail<ValueError>("flags", "--{} values must be in [{}, {}], got {}", flag, lo, hi, x);
  return v;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> lm_cost_grid(const LmCostOptions& o) {
  for (int64_t H : o.heads)
    if (H < 1 || o.d_model % H != 0)
      fail<ValueError>("flags", "--heads {} must divide --d-model {}; hint: a power of two up to {}", H, o.d_model,
                       o.d_model);
  if (!o.kv_heads.empty() && std::find(o.heads.begin(), o.heads.end(), o.kv_at_heads) == o.heads.end())
    fail<ValueError>("flags", "--kv-at-heads {} is not among --heads; hint: add it to --heads", o.kv_at_heads);
  for (int64_t G : o.kv_heads)
    if (G < 1 || o.kv_at_heads % G != 0)
      fail<ValueError>("flags", "--kv-heads {} must divide the {} heads it is timed at (--kv-at-heads); hint: a "
                       "divisor of {}", G, o.kv_at_heads, o.kv_at_heads);
  std::vector<std::pair<int64_t, int64_t>> grid;
  auto add = [&](int64_t H, int64_t G) {
    if (std::find(grid.begin(), grid.end(), std::make_pair(H, G)) == grid.end()) grid.emplace_back(H, G);
  };
  for (int64_t H : o.heads) {
    add(H, H);
    if (H == o.kv_at_heads)
      for (int64_t G : o.kv_heads) add(H, G);
  }
  return grid;
}

LmCostResult measure_lm_cost(const LmCostOptions& o) {
  const auto start = Clock::now();
  if (o.lengths.empty()) fail<ValueError>("flags", "--lengths needs at least one value");
  std::unique_ptr<GPT> trained;
  std::vector<GPTConfig> shapes;
  if (!o.checkpoint.empty()) {
    trained = gpt_from_checkpoint(load_checkpoint(o.checkpoint, false, CheckpointReader{"head_probe", "lm"}));
    shapes.push_back(trained->config);
  } else {
    for (const auto& [H, G] : lm_cost_grid(o)) shapes.push_back(grid_config(o, H, G));
  }
  LmCostResult r;
  r.cpu = cpu_model_name();
  const int64_t shortest = *std::min_element(o.lengths.begin(), o.lengths.end());
  for (const GPTConfig& c : shapes) {
    for (int64_t t : o.lengths) r.cached.push_back(measure_cached(o, c, t, trained.get()));
    r.uncached.push_back(measure_uncached(o, c, shortest, trained.get()));
  }
  r.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

std::string lm_cost_table(const LmCostOptions& o, const LmCostResult& r) {
  std::string s = fmt::format("lm-cost on {}, {} thread(s), batch {}, median of {} decodes after a warm-up\n", r.cpu,
                              o.threads, o.batch, o.repeats);
  s += fmt::format("{:>3} {:>3} {:>5} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10}\n", "H", "G", "t", "ms/token", "cpu ms",
                   "KV bytes", "formula", "allocated", "peak");
  for (const LmCostRow& x : r.cached)
    s += fmt::format("{:>3} {:>3} {:>5} {:>9.4f} {:>9.4f} {:>10} {:>10} {:>10} {:>10}\n", x.heads, x.kv_heads, x.t,
                     x.per_token.wall_ms, x.per_token.cpu_ms, x.kv_bytes_used, x.kv_bytes_formula,
                     x.kv_bytes_allocated, x.peak_bytes);
  s += "without the cache (every token re-runs the graph over its window):\n";
  for (const LmUncachedRow& x : r.uncached)
    s += fmt::format("{:>3} {:>3} {:>5} {:>9.4f} {:>9.4f}\n", x.heads, x.kv_heads, x.t, x.per_token.wall_ms,
                     x.per_token.cpu_ms);
  s += fmt::format("wall time {:.1f} s\n", r.wall_s);
  return s;
}

nlohmann::json lm_cost_json(const LmCostOptions& o, const LmCostResult& r) {
  nlohmann::json cached = nlohmann::json::array(), uncached = nlohmann::json::array();
  for (const LmCostRow& x : r.cached)
    cached.push_back({{"heads", x.heads}, {"kv_heads", x.kv_heads}, {"t", x.t},
                      {"ms_per_token", x.per_token.wall_ms}, {"cpu_ms_per_token", x.per_token.cpu_ms},
                      {"kv_bytes_used", x.kv_bytes_used}, {"kv_bytes_formula", x.kv_bytes_formula},
                      {"kv_bytes_allocated", x.kv_bytes_allocated}, {"peak_bytes", x.peak_bytes}});
  for (const LmUncachedRow& x : r.uncached)
    uncached.push_back({{"heads", x.heads}, {"kv_heads", x.kv_heads}, {"t", x.t},
                        {"ms_per_token", x.per_token.wall_ms}, {"cpu_ms_per_token", x.per_token.cpu_ms}});
  nlohmann::json model = {{"d_model", o.d_model}, {"d_ff", o.d_ff}, {"layers", o.layers}, {"vocab", o.vocab}};
  if (!o.checkpoint.empty()) model = {{"checkpoint", o.checkpoint}};
  return {{"cpu", r.cpu},
          {"threads", o.threads},
          {"batch", o.batch},
          {"repeats", o.repeats},
          {"model", model},
          {"cached", cached},
          {"uncached", uncached},
          {"wall_s", r.wall_s},
          {"note", "ms_per_token: median over repeats of one decode's wall time / t (cpu_ms_per_token: the "
                   "process's CPU time, all threads, the steadier on a loaded machine); cached: GPT::decode_step "
                   "from an empty cache (weights packed on its first step, as lm sample); uncached: the graph over "
                   "tokens 0..i for token i; kv_bytes_formula = 2*L*B*t*G*D*4; peak_bytes: the high-water mark of a "
                   "fresh allocator over one cached decode (cache, packed weights, buffers; the model's weights "
                   "excluded)"}};
}

std::optional<LmCostOptions> lm_cost_options(int argc, char** argv) {
  using config_sizes::kMaxLength;
  const LmCostOptions d;
  cxxopts::Options opts(argv[0], "Decode ms/token and KV-cache bytes of a GPT against its heads H and K/V heads G "
                        "(random weights at the heads study's width unless --checkpoint).");
  opts.add_options()
      ("heads", "query heads H, each timed with G = H (each must divide --d-model)",
       cxxopts::value<std::vector<int64_t>>()->default_value("1,2,4,8,16"))
      ("kv-heads", "K/V heads G timed besides G = H, at H = --kv-at-heads (each must divide it)",
       cxxopts::value<std::vector<int64_t>>())
      ("kv-at-heads", "the H the --kv-heads are timed at", cxxopts::value<int64_t>()->default_value("8"))
      ("lengths", "decoded tokens t, each also the model's context",
       cxxopts::value<std::vector<int64_t>>()->default_value("64,256,1024"))
      ("d-model", "model width E", cxxopts::value<int64_t>()->default_value(std::to_string(d.d_model)))
      ("d-ff", "MLP width", cxxopts::value<int64_t>()->default_value(std::to_string(d.d_ff)))
      ("layers", "blocks L", cxxopts::value<int64_t>()->default_value(std::to_string(d.layers)))
      ("vocab", "vocabulary V", cxxopts::value<int64_t>()->default_value(std::to_string(d.vocab)))
      ("batch", "rows B decoded together", cxxopts::value<int64_t>()->default_value("1"))
      ("repeats", "timed decodes per point (the median is reported), after one warm-up",
       cxxopts::value<int64_t>()->default_value("5"))
      ("threads", "threads of the pool", cxxopts::value<int>()->default_value("1"))
      ("checkpoint", "an lm checkpoint (directory or model file): its shape and weights instead of the grid's "
       "random ones; --heads, --kv-heads and the size flags then do not apply",
       cxxopts::value<std::string>()->default_value(""))
      ("out", "the JSON file to write (required)", cxxopts::value<std::string>()->default_value(""))
      ("h,help", "show this help");
  const cxxopts::ParseResult r = cli::parse_flags(opts, argc, argv);
  if (r.count("help")) {
    fmt::print("{}\n", opts.help());
    return std::nullopt;
  }
  if (!r.unmatched().empty()) fail<ValueError>("flags", "unexpected argument '{}'", r.unmatched()[0]);
  LmCostOptions o;
  o.out = r["out"].as<std::string>();
  if (o.out.empty()) fail<ValueError>("flags", "--out is required; hint: --out lm-cost.json");
  o.checkpoint = r["checkpoint"].as<std::string>();
  if (!o.checkpoint.empty())
    for (const char* flag : {"heads", "kv-heads", "kv-at-heads", "d-model", "d-ff", "layers", "vocab"})
      if (r.count(flag))
        fail<ValueError>("flags", "--{} does not apply with --checkpoint, whose model has its own shape; hint: drop "
                         "one of them", flag);
  o.heads = int_list(r, "heads", 1, 1 << 10);
  if (r.count("kv-heads")) o.kv_heads = int_list(r, "kv-heads", 1, 1 << 10);
  o.kv_at_heads = cli::flag_in_range<int64_t>(r, "kv-at-heads", 1, 1 << 10);
  o.lengths = int_list(r, "lengths", 1, kMaxLength);
  o.d_model = cli::flag_in_range<int64_t>(r, "d-model", 1, 1 << 14);
  o.d_ff = cli::flag_in_range<int64_t>(r, "d-ff", 1, 1 << 16);
  o.layers = cli::flag_in_range<int64_t>(r, "layers", 1, 64);
  o.vocab = cli::flag_in_range<int64_t>(r, "vocab", 1, 1 << 20);
  o.batch = cli::flag_in_range<int64_t>(r, "batch", 1, 1 << 12);
  o.repeats = cli::flag_in_range<int64_t>(r, "repeats", 1, 1000);
  o.threads = num_threads();  // parse_flags applied --threads
  if (o.checkpoint.empty()) lm_cost_grid(o);  // a bad H or G fails before any work
  return o;
}

int lm_cost_main(int argc, char** argv) {
  const std::optional<LmCostOptions> o = lm_cost_options(argc, argv);
  if (!o) return 0;
  const LmCostResult res = measure_lm_cost(*o);
  fmt::print("{}", lm_cost_table(*o, res));
  write_file_atomic(o->out, lm_cost_json(*o, res).dump(2) + "\n");
  fmt::print("wrote {}\n", o->out);
  return 0;
}

}  // namespace attograd::app::probe
