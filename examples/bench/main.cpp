// bench: times attograd's training step and greedy decoding on fixed
// configurations, for comparison with PyTorch (tools/bench_torch.py prints
// the same lines; scripts/bench runs both).
//
//   bench [--config tiny|base|lm|all] [--threads 1,2] [--warmup 5] [--steps 50]
//   mpirun -np N bench --data-parallel [--config base] [--threads 1] ...
//   bench [--config base] [--d-model N] [--len N] [--batch N] ...   (shapes of scripts/bench --sweep)
//   bench --decode [--lengths 32,128] [--decode-batch 64] [--repeats 3] [--no-cache-up-to N]
//   bench --sgemm-rate [--config base] [--threads 1,2] ...   (the step's GEMMs alone)
//   bench --precision bf16 ...   (training and --sgemm-rate with bf16 autocast: autocast.h)
//
// Shape legend: B batch, L sequence length (S = T = L), E d_model, F d_ff,
// V vocab, H heads, N_e / N_d encoder / decoder layers, N GPT blocks.
//
// tiny and base are Seq2SeqTransformers on copy-task batches, lm is the lm
// program's default GPT on random token windows (examples/bench/workloads.h).
// A training step is forward + cross-entropy + backward + Adam step (dropout 0).
// Each printed line is one measurement:
//   bench framework=attograd mode=train config=tiny threads=1 kernel=Cooperlake steps=50 step_ms=… tok_s=… gflops=… peak_rss_mb=… peak_tensor_mb=… precision=f32
//   bench framework=attograd mode=dp config=base procs=2 threads=1 kernel=… steps=50 step_ms=… tok_s=… allreduce_ms=… allreduce_pct=… peak_rss_mb=…
//   bench framework=attograd mode=decode config=base threads=1 kernel=… batch=64 len=32 cache=yes ms=… tok_s=… peak_rss_mb=… same=yes
//   bench framework=attograd mode=sgemm config=base threads=2 kernel=… steps=50 step_ms=… gflops=…
// tok_s counts target tokens (B·L per training step, B·len per decode).
// Training, data-parallel and sgemm lines end in precision=f32|bf16:
// --precision bf16 runs each step's forward under AutocastGuard (its
// products' operands rounded to bf16, f32 sums; the backward keeps the
// forward's choice), as `--precision bf16` trains, and --sgemm-rate times
// gemm_bf16 at the step's shapes. On a CPU whose bf16 products would not run
// native (trainer.h's plan_precision) bench prints one line instead,
//   skip row=bf16 reason="…"
// and times nothing: a bf16 row widened to f32 would only measure f32.
// peak_rss_mb is the process's peak resident set so far (getrusage), so
// scripts/bench runs one configuration per process; peak_tensor_mb the
// tensors' own high-water mark (the allocator's live bytes, no cache).
//
// --data-parallel trains as examples/common's Trainer does in a world of N
// processes (dist::world(): mpirun's, else the world of one): each rank takes
// B/N rows of every batch, and after backward the loss and then the gradients
// (dist::GradientReducer, mean, with its default options: buckets start
// during backward) are all-reduced. The line (rank 0's) gives the global
// batch's tok/s and the median time per step inside the reducer
// (GradientReducer::seconds(): packing, starting, waiting, unpacking), also
// as a percentage of the median step.
//
// --sgemm-rate runs only the step's matrix products (bench::step_gemms: every
// forward and backward GEMM of a training step at its shape, the per-head
// ones B·H side by side on the pool as the fused attention issues them)
// through gemm<float> on random data, and reports their FLOP rate: the
// ceiling the model's GFLOP/s are measured against (scripts/bench prints the
// share at the same thread count).
//
// Model FLOPs (matmul FLOPs only, 2 per multiply-add; a training step counts
// 3× the forward: backward computes two products per forward product):
//   encoder layer   8·B·L·E² (q, k, v, out)  + 4·B·L²·E (scores, P·V)  + 4·B·L·E·F (FFN)
//   decoder layer   8·B·L·E² + 4·B·L²·E  (causal self-attention, computed in full)
//                 + 8·B·L·E² + 4·B·L²·E  (cross-attention: q, out on targets; k, v on memory)
//                 + 4·B·L·E·F
//   GPT block       8·B·L·E² + 4·B·L²·E + 4·B·L·E·F  (as an encoder layer, causal in full)
//   generator       2·B·L·E·V  (lm_head for the GPT)
// Embeddings, layer norms, softmax, elementwise ops and Adam are not counted.
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <random>
#include <sstream>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <attograd/autograd/backend/allocator.h>
#include <attograd/autograd/backend/gemm.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/settings.h>
#include <attograd/dist/communicator.h>
#include <attograd/dist/reducer.h>
#include <attograd/nn/transformer.h>
#include <attograd/optim/adam.h>
#include "examples/bench/workloads.h"
#include "examples/common/cli.h"
#include "examples/common/train_choices.h"
#include "examples/common/trainer.h"

using namespace attograd;
using namespace attograd::app;
using bench::BenchConfig;

namespace {

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// The tensors' high-water mark (the allocator's count of live bytes): peak
// RSS without the code, the libraries and the allocator's cache of free blocks.
double peak_tensor_mb() { return static_cast<double>(current_allocator()->peak_bytes()) / (1 << 20); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Sizes the pool for one row of the --threads sweep (the list is bench's own,
// so cli::parse_flags leaves it alone); the BLAS kernel's name for the row.
std::string use_threads(int threads) {
  cli::warn_if_oversubscribed(threads);
  set_num_threads(threads);
  return blas_corename();
}

std::string prefix(const std::string& mode, const BenchConfig& c, int threads, const std::string& kernel) {
  return fmt::format("bench framework=attograd mode={} config={} threads={} kernel={}", mode, c.name, threads, kernel);
}

// Workload::loss of batch i with the forward under `precision` (the backward
// keeps it), as the Trainer's step.
Tensor loss_at(const bench::Workload& w, int64_t i, Precision precision) {
  const AutocastGuard autocast(precision);
  return w.loss(i);
}

std::string precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "f32"; }

void bench_train(const BenchConfig& c, int threads, int64_t warmup, int64_t steps, uint64_t seed,
                 Precision precision) {
  const std::string kernel = use_threads(threads);
  bench::Workload w = bench::make_workload(c, seed, {0, c.batch});
  optim::Adam opt(w.model->parameters());
  std::vector<double> ms;
  for (int64_t i = 0; i < warmup + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    loss_at(w, i, precision).backward();
    opt.step();
    opt.zero_grad();
    const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) ms.push_back(dt);
  }
  const double step_ms = median(ms);
  const double tokens = static_cast<double>(c.batch * c.len);
  fmt::print("{} steps={} step_ms={:.3f} tok_s={:.0f} gflops={:.2f} peak_rss_mb={:.1f} peak_tensor_mb={:.1f} "
             "precision={}\n", prefix("train", c, threads, kernel), steps, step_ms, tokens / (step_ms / 1e3),
             3 * bench::forward_flops(c) / (step_ms / 1e3) / 1e9, peak_rss_mb(), peak_tensor_mb(),
             precision_name(precision));
}

// A training step as the Trainer takes it in a world of N ranks; see the
// header comment. In the world of one the reducer makes no call.
void bench_data_parallel(const BenchConfig& c, int threads, int64_t warmup, int64_t steps, uint64_t seed,
                         Precision precision) {
  const std::string kernel = use_threads(threads);
  dist::Communicator& comm = dist::world();
  const int64_t n = comm.size(), share = c.batch / n;
  if (c.batch % n != 0)
    fail<ValueError>("flags", "--data-parallel needs the batch ({}) divisible by the {} processes", c.batch, n);
  bench::Workload w = bench::make_workload(c, seed, {comm.rank() * share, (comm.rank() + 1) * share});
  const std::vector<Tensor> params = w.model->parameters();
  dist::broadcast_parameters(comm, params);
  dist::GradientReducer reducer(comm, params);
  optim::Adam opt(params);
  std::vector<double> ms, reduce_ms;
  for (int64_t i = 0; i < warmup + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const double before = reducer.seconds();  // its buckets may start during backward (overlap)
    Tensor loss = loss_at(w, i, precision);
    loss.backward();
    double value = loss.item() / static_cast<double>(n);
    comm.allreduce_sum(std::span<double>(&value, 1));
    reducer.allreduce(dist::ReduceOp::mean);
    const double reduced = (reducer.seconds() - before) * 1e3;
    opt.step();
    opt.zero_grad();
    const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) {
      ms.push_back(dt);
      reduce_ms.push_back(reduced);
    }
  }
  if (comm.rank() != 0) return;
  const double step_ms = median(ms), allreduce_ms = median(reduce_ms);
  fmt::print("bench framework=attograd mode=dp config={} procs={} threads={} kernel={} steps={} step_ms={:.3f} "
             "tok_s={:.0f} allreduce_ms={:.3f} allreduce_pct={:.1f} peak_rss_mb={:.1f} precision={}\n",
             c.name, n, threads, kernel, steps, step_ms, static_cast<double>(c.batch * c.len) / (step_ms / 1e3),
             allreduce_ms, 100 * allreduce_ms / step_ms, peak_rss_mb(), precision_name(precision));
}

// Greedy decoding of B sequences to exactly `len` tokens (no stop at EOS, so
// every run does the same work). With the cache each step feeds one token;
// without it, the whole prefix.
std::vector<int64_t> greedy(Seq2SeqTransformer& model, const Tensor& src, int64_t len, bool use_cache) {
  NoGradGuard no_grad;
  const int64_t B = src.size(0), V = model.config.tgt_vocab;
  Tensor memory = model.encode(src);
  KVCache cache = model.make_cache();
  std::vector<int64_t> tokens(B * (len + 1), 0);  // [B, len + 1], column 0 is BOS
  for (int64_t b = 0; b < B; ++b) tokens[b * (len + 1)] = bench::kBos;
  for (int64_t t = 0; t < len; ++t) {
    std::vector<int64_t> in;
    const int64_t from = use_cache ? t : 0, width = t + 1 - from;
    for (int64_t b = 0; b < B; ++b)
      in.insert(in.end(), tokens.begin() + b * (len + 1) + from, tokens.begin() + b * (len + 1) + t + 1);
    const std::vector<float> last =
        use_cache ? model.decode_step(in, cache, memory).to_vector<float>()  // [B, V]
                  : model.decode(Tensor::from_vector(in, {B, width}), memory).narrow(1, width - 1, 1).contiguous()
                        .to_vector<float>();  // the last of [B, width, V]
    for (int64_t b = 0; b < B; ++b) {
      const float* row = last.data() + b * V;
      tokens[b * (len + 1) + t + 1] = std::max_element(row, row + V) - row;
    }
  }
  return tokens;
}

void bench_decode(const BenchConfig& c, int threads, int64_t batch, const std::vector<int64_t>& lengths,
                  int64_t repeats, int64_t no_cache_up_to, uint64_t seed) {
  const std::string kernel = use_threads(threads);
  Generator gen(seed);
  Seq2SeqTransformer model(bench::seq2seq_config(c), gen, nullptr);
  model.eval();
  std::mt19937_64 rng(seed);
  BenchConfig bc = c;
  bc.batch = batch;
  const Tensor src = bench::make_copy_batch(bc, rng).src;
  for (bool use_cache : {true, false}) greedy(model, src, 4, use_cache);  // warm-up
  for (int64_t len : lengths) {
    std::vector<int64_t> with_cache;
    for (bool use_cache : {true, false}) {
      if (!use_cache && len > no_cache_up_to) continue;
      std::vector<double> ms;
      std::vector<int64_t> out;
      for (int64_t r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        out = greedy(model, src, len, use_cache);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      if (use_cache) with_cache = out;
      const double t = median(ms);
      fmt::print("{} batch={} len={} cache={} ms={:.3f} tok_s={:.0f} peak_rss_mb={:.1f} same={}\n",
                 prefix("decode", c, threads, kernel), batch, len, use_cache ? "yes" : "no", t,
                 static_cast<double>(batch * len) / (t / 1e3), peak_rss_mb(), out == with_cache ? "yes" : "no");
    }
  }
}

// The step's GEMMs alone, timed like a training step; see the header comment.
void bench_sgemm(const BenchConfig& c, int threads, int64_t warmup, int64_t steps, uint64_t seed,
                 Precision precision) {
  const std::string kernel = use_threads(threads);
  const std::vector<bench::StepGemm> gemms = bench::step_gemms(c);
  int64_t na = 0, nb = 0, nout = 0;
  for (const bench::StepGemm& g : gemms) {
    na = std::max(na, g.heads * g.M * g.K);
    nb = std::max(nb, g.heads * g.K * g.N);
    nout = std::max(nout, g.heads * g.M * g.N);
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<float> a(na), b(nb), out(nout);
  for (auto* v : {&a, &b, &out})
    for (float& x : *v) x = uni(rng);
  // bf16: the same operands rounded once (autocast rounds them per call: that pass is not a GEMM's).
  const std::vector<BFloat16> a16(a.begin(), a.end()), b16(b.begin(), b.end());
  auto run = [&](const bench::StepGemm& g, int64_t head) {
    // Contiguous operands: op(a) [M, K], op(b) [K, N], stored transposed where flagged.
    auto call = [&](const auto& av, const auto& bv) {
      gemm(out.data() + head * g.M * g.N, av.data() + head * g.M * g.K, bv.data() + head * g.K * g.N, g.M, g.N, g.K,
           g.trans_a, g.trans_b, g.trans_a ? g.M : g.K, g.trans_b ? g.K : g.N, g.N, g.alpha, g.beta);
    };
    if (precision == Precision::bf16) call(a16, b16);
    else call(a, b);
  };
  std::vector<double> ms;
  std::vector<std::vector<double>> shape_ms(gemms.size());
  for (int64_t i = 0; i < warmup + steps; ++i) {
    double dt = 0;
    for (size_t s = 0; s < gemms.size(); ++s) {
      const bench::StepGemm& g = gemms[s];
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t call = 0; call < g.calls; ++call) {
        if (g.heads == 1) {
          run(g, 0);
          continue;
        }
        parallel_for(g.heads, 1, [&](int64_t first, int64_t last) {
          for (int64_t h = first; h < last; ++h) run(g, h);
        });
      }
      const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (i >= warmup) shape_ms[s].push_back(t);
      dt += t;
    }
    if (i >= warmup) ms.push_back(dt);
  }
  const double step_ms = median(ms);
  fmt::print("{} steps={} step_ms={:.3f} gflops={:.2f} precision={}\n", prefix("sgemm", c, threads, kernel), steps,
             step_ms, bench::gemm_flops(gemms) / (step_ms / 1e3) / 1e9, precision_name(precision));
  // Per shape, on lines of their own (scripts/bench reads only the line above).
  for (size_t s = 0; s < gemms.size(); ++s) {
    const bench::StepGemm& g = gemms[s];
    const double t = median(shape_ms[s]);
    const std::string library = precision == Precision::bf16 ? bf16_gemm_name(bf16_gemm_kernel())
                                : std::string(gemm_backend_name(gemm_backend() == GemmBackend::blas
                                                        ? routed_gemm_backend(g.M, g.N, g.K, g.trans_b, g.alpha, g.beta)
                                                        : gemm_backend()));
    fmt::print("  gemm {}x{}x{} {}{} calls={} heads={} library={} ms={:.3f} share={:.1f}% gflops={:.2f}\n", g.M, g.N,
               g.K, g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', g.calls, g.heads, library, t,
               100 * t / step_ms, bench::gemm_flops({g}) / (t / 1e3) / 1e9);
  }
}

// --d-model, --len and --batch replace the config's values.
void override_shape(BenchConfig& c, const cxxopts::ParseResult& r) {
  if (r.count("d-model")) {
    c.d_model = cli::flag_in_range<int64_t>(r, "d-model", 1, 1 << 14);
    if (c.d_model % c.heads != 0)
      fail<ValueError>("flags", "--d-model must be a positive multiple of the {} heads, got {}", c.heads, c.d_model);
    c.d_ff = 4 * c.d_model;
  }
  if (r.count("len")) c.len = cli::flag_in_range<int64_t>(r, "len", 2, 256);
  if (r.count("batch")) c.batch = cli::flag_in_range<int64_t>(r, "batch", 1, 1 << 16);
}

template <class T>
std::vector<T> parse_list(const std::string& flag, const std::string& s, T lo, T hi) {
  std::vector<T> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    T v{};
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size())
      fail<ValueError>("flags", "--{} expects comma-separated integers, got '{}'", flag, s);
    if (v < lo || v > hi) fail<ValueError>("flags", "--{} values must be in [{}, {}], got {}", flag, lo, hi, v);
    out.push_back(v);
  }
  if (out.empty()) fail<ValueError>("flags", "--{} is empty", flag);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::guarded_main("bench", [&] {
    cxxopts::Options o("bench", "Time attograd's training step and greedy decoding (see tools/bench_torch.py, scripts/bench).");
    o.add_options()
        ("config", "tiny, base, lm or all", cxxopts::value<std::string>()->default_value("all"))
        ("threads", "comma-separated thread counts", cxxopts::value<std::string>()->default_value("1,2"))
        ("warmup", "untimed steps first", cxxopts::value<int64_t>()->default_value("5"))
        ("steps", "timed steps (median reported)", cxxopts::value<int64_t>()->default_value("50"))
        ("d-model", "override the config's d_model; d_ff becomes 4 × d_model (scripts/bench --sweep)",
         cxxopts::value<int64_t>())
        ("len", "override the config's sequence length (2..256)", cxxopts::value<int64_t>())
        ("batch", "override the config's batch", cxxopts::value<int64_t>())
        ("data-parallel", "train as the Trainer does across the processes of mpirun (dist::world()), timing the allreduce")
        ("decode", "time greedy decoding on the base model instead of training")
        ("sgemm-rate", "time only the training step's matrix products, at their shapes (the GFLOP/s ceiling)")
        ("lengths", "decode lengths", cxxopts::value<std::string>()->default_value("32,128"))
        ("decode-batch", "sequences decoded at once", cxxopts::value<int64_t>()->default_value("64"))
        ("repeats", "timed decode runs per setting (median reported)", cxxopts::value<int64_t>()->default_value("3"))
        ("no-cache-up-to", "decode without the cache only up to this length",
         cxxopts::value<int64_t>()->default_value("254"))
        ("seed", "weights and data", cxxopts::value<uint64_t>()->default_value("1"))
        ("precision", "f32, or bf16: the products in bfloat16 with f32 sums (training, --data-parallel, --sgemm-rate)",
         cxxopts::value<std::string>()->default_value("f32"))
        ("h,help", "show this help");
    auto r = cli::parse_flags(o, argc, argv);
    if (r.count("help")) {
      fmt::print("{}\n", o.help());
      return 0;
    }
    const std::string which = r["config"].as<std::string>();
    std::vector<BenchConfig> configs;
    for (const BenchConfig& c : {bench::kTiny, bench::kBase, bench::kLm})
      if (which == c.name || which == "all") configs.push_back(c);
    if (configs.empty()) fail<ValueError>("flags", "--config must be tiny, base, lm or all, got '{}'", which);
    for (BenchConfig& c : configs) override_shape(c, r);
    const auto threads = parse_list<int>("threads", r["threads"].as<std::string>(), 1, 256);
    const int64_t warmup = cli::flag_in_range<int64_t>(r, "warmup", 0, 1'000'000);
    const int64_t steps = cli::flag_in_range<int64_t>(r, "steps", 1, 1'000'000);
    const uint64_t seed = r["seed"].as<uint64_t>();
    const Precision asked = find_choice(precision_choices(), r["precision"].as<std::string>(), "precision").value;
    if (r.count("decode") && asked == Precision::bf16)
      fail<ValueError>("flags", "--precision bf16 times training (and --sgemm-rate); decoding runs in float32, so "
                       "--decode takes no --precision");
    if (asked == Precision::bf16) {
      const PrecisionPlan plan = plan_precision(asked, bf16_gemm_kernel(), bf16_gemm_fallback_reason());
      if (plan.precision != Precision::bf16) {  // every rank skips; one line says so
        if (dist::world().rank() == 0) fmt::print("skip row=bf16 reason=\"{}\"\n", plan.note);
        return 0;
      }
    }
    if (r.count("decode")) {
      const auto lengths = parse_list<int64_t>("lengths", r["lengths"].as<std::string>(), 1, 254);
      const int64_t batch = cli::flag_in_range<int64_t>(r, "decode-batch", 1, 1 << 16);
      const int64_t repeats = cli::flag_in_range<int64_t>(r, "repeats", 1, 1'000'000);
      const int64_t no_cache_up_to = cli::flag_in_range<int64_t>(r, "no-cache-up-to", 0, 254);
      for (int t : threads) bench_decode(which == "tiny" ? bench::kTiny : bench::kBase, t, batch, lengths, repeats, no_cache_up_to, seed);
      return 0;
    }
    const auto train = r.count("sgemm-rate") ? bench_sgemm : r.count("data-parallel") ? bench_data_parallel : bench_train;
    for (const BenchConfig& c : configs)
      for (int t : threads) train(c, t, warmup, steps, seed, asked);
    return 0;
  });
}
