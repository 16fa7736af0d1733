// bf16_gemm_probe: which library should run attograd's bf16 x bf16 -> f32
// products (issue 32, docs/design/bf16.md §2 and §6)? A standalone
// microbenchmark, not part of the CMake build. For each shape it
//
//   1. checks each library's result against a reference that multiplies the
//      same bf16-rounded inputs in double, on a sample of output rows, and
//      prints the largest |C - C_ref| / (|A|·|B|)_ij. A bf16 x bf16 product
//      is exact in f32 (8 + 8 significant bits), so only the f32
//      accumulation errs: the bound printed is γ_K = K·u / (1 - K·u),
//      u = 2^-24 (typical errors are far below it, ~1e-7);
//   2. times, single-threaded, the median over repeats (each repeat runs
//      enough calls to last --min-ms; the libraries take turns within a
//      repeat, so a load change hits them all):
//        sgemm      OpenBLAS cblas_sgemm on the f32 inputs (today's path)
//        xsmm       libxsmm 1.17 libxsmm_bsmmdispatch, one JIT kernel for
//                   the whole product (bf16 in, f32 out, VNNI-packed b)
//        xsmm-tile  the same kernel type on --tile x --tile blocks of the
//                   output (libxsmm does no cache blocking of its own)
//        dnnl       oneDNN matmul, bf16 src/weights in their plain layout
//                   (transposes as strides), f32 dst
//        dnnl-any   oneDNN matmul with weights in the layout it asks for
//                   (format_tag::any), b reordered f32 -> packed bf16 by a
//                   oneDNN reorder
//      each twice: "kern" (the library call alone, operands ready) and
//      "+conv" (plus what a training step pays on every call: the f32 ->
//      bf16 conversion, round to nearest even as bfloat16.h, of every
//      operand that is not a weight, with the transpose or VNNI packing the
//      library needs). A weight's conversion/packing can be cached per
//      optimizer step, so it is timed on its own ("wprep", µs per call).
//
// Products (row-major, op(a) [M, K] · op(b) [K, N] = c [M, N]; "TN" = a
// stored transposed, "NT" = b stored transposed):
//   Linear (R rows = batch·time, out N, in K):
//     fwd  y  = x · Wᵀ      R x N x K   NT   b = W is the weight
//     dx   dx = g · W       R x K x N   NN   b = W is the weight
//     dW   dW = gᵀ · x      N x K x R   TN   no weight (both activations)
//   Attention, one head (T x D):
//     S    S = Q · Kᵀ       T x T x D   NT   no weight
//     O    O = P · V        T x D x T   NN   no weight
// Shapes: R in {2048, 4096} x (N, K) in {(128,128), (512,128), (128,512),
// (512,512), (1536,512), (2048,512), (512,2048)}; T in {64, 128} x D in
// {16, 32, 64}.
//
// Layout notes (what each library accepted, probed at start-up and printed):
//   libxsmm 1.17 is column-major, so c [M, N] row-major = its C [N, M] with
//   its A = our b and its B = our a. Its bf16 JIT needs LIBXSMM_GEMM_FLAG_VNNI_A
//   (its A, i.e. our b, stored [K/2][N][2]: pairs of consecutive k side by
//   side) and takes no transposed operand, so a transposed a is copied
//   transposed while it is converted, and b's VNNI packing absorbs its
//   transpose. K must be even here (every shape above is).
//   oneDNN 2.6 takes transposes as memory-descriptor strides.
//
// Build (from /work/bf16; -march=native: build on the machine that runs it;
// each command is one line):
//   without oneDNN:
//     g++ -std=c++20 -O3 -march=native -I. bench/bf16_gemm_probe.cpp -o /tmp/bf16_gemm_probe -lxsmm -lopenblas -lpthread -ldl -lrt -lm
//   with oneDNN (apt-get install --no-install-recommends libdnnl-dev):
//     g++ -std=c++20 -O3 -march=native -fopenmp -DPROBE_DNNL -I. bench/bf16_gemm_probe.cpp -o /tmp/bf16_gemm_probe -ldnnl -lxsmm -lopenblas -lpthread -ldl -lrt -lm
// Run:
//   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /tmp/bf16_gemm_probe            (full timing)
//   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /tmp/bf16_gemm_probe --quick    (correctness, 1 call each)
// Options: --reps N (21), --min-ms X (5), --tile T (64), --check-rows R (64),
//   --only linear|attention. ONEDNN_VERBOSE=1 shows oneDNN's kernels too.
// The program also sets both libraries to one thread itself: openblas_set_num_threads(1),
// and omp_set_num_threads(1) before its first oneDNN call.
#include <libxsmm.h>
#include <cblas.h>  // OpenBLAS's (Debian: cblas.h is OpenBLAS's when libopenblas-dev is the alternative)

#include <attograd/autograd/bfloat16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#ifdef PROBE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl_debug.h>
#endif

namespace {

using attograd::bf16_bits_from_float;
using attograd::float_from_bf16_bits;

// Command-line settings (see the top comment).
struct Options {
  int reps = 21;
  double min_ms = 5.0;
  int64_t tile = 64;
  int64_t check_rows = 64;
  bool quick = false;
  std::string only;  // "", "linear" or "attention"
};

// A 64-byte-aligned array of n Ts (no initialisation).
template <class T>
struct Buf {
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> p;
  int64_t n = 0;
  Buf() = default;
  explicit Buf(int64_t count) : n(count) {
    const size_t bytes = (static_cast<size_t>(count) * sizeof(T) + 63) / 64 * 64;
    p.reset(static_cast<T*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes)));
    if (!p) throw std::runtime_error("bf16_gemm_probe: out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  T* get() const { return p.get(); }
};

// ---------------------------------------------------------------- conversions

// dst[i] = bf16(src[i]), i < n: a plain conversion (what every operand pays once).
void convert(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_from_float(src[i]);
}

// dst [C, R] (row-major, ld R) = bf16 of src [R, C] (rows ld apart) transposed, in 32 x 32 tiles.
void convert_transposed(const float* src, int64_t ld, int64_t R, int64_t C, uint16_t* dst) {
  constexpr int64_t kT = 32;
  for (int64_t r0 = 0; r0 < R; r0 += kT)
    for (int64_t c0 = 0; c0 < C; c0 += kT)
      for (int64_t c = c0, c1 = std::min(C, c0 + kT); c < c1; ++c)
        for (int64_t r = r0, r1 = std::min(R, r0 + kT); r < r1; ++r) dst[c * R + r] = bf16_bits_from_float(src[r * ld + c]);
}

// The VNNI layout libxsmm's bf16 kernels read for our b (op(b) [K, N]):
// dst[(k/2)·2N + 2j + (k&1)] = bf16(op(b)(k, j)), K even. op(b)(k, j) is
// src[k·ld + j], or src[j·ld + k] when b is stored transposed ([N, K]).
void pack_vnni(const float* src, int64_t ld, bool trans, int64_t K, int64_t N, uint16_t* dst) {
  if (K % 2 != 0)
    throw std::invalid_argument("pack_vnni: K must be even for the VNNI pairs, got " + std::to_string(K) +
                                "; hint: pad K with a zero row");
  if (!trans) {
    for (int64_t k = 0; k < K; k += 2) {
      const float* r0 = src + k * ld;
      const float* r1 = r0 + ld;
      uint16_t* d = dst + k * N;
      for (int64_t j = 0; j < N; ++j) {
        d[2 * j] = bf16_bits_from_float(r0[j]);
        d[2 * j + 1] = bf16_bits_from_float(r1[j]);
      }
    }
    return;
  }
  // src [N, K]: the pair (k, k+1) of row j is adjacent; 64 k at a time so the
  // 32 destination rows written per j stay in cache.
  constexpr int64_t kB = 64;
  for (int64_t k0 = 0; k0 < K; k0 += kB)
    for (int64_t j = 0; j < N; ++j) {
      const float* s = src + j * ld;
      for (int64_t k = k0, k1 = std::min(K, k0 + kB); k < k1; k += 2) {
        uint16_t* d = dst + k * N + 2 * j;
        d[0] = bf16_bits_from_float(s[k]);
        d[1] = bf16_bits_from_float(s[k + 1]);
      }
    }
}

// ---------------------------------------------------------------- products

// One product c [M, N] = op(a) [M, K] · op(b) [K, N], row-major, and what it is in a step.
struct Product {
  std::string shape;   // e.g. "lin R=2048 N=512 K=128"
  std::string layout;  // e.g. "fwd NT"
  int64_t M, N, K;
  bool ta, tb;     // a stored [K, M] / b stored [N, K]
  bool b_weight;   // b is a weight: its conversion is cached per optimizer step
};

// The inputs of a product: f32 as a step has them, their bf16 roundings (same layout) for the reference.
struct Operands {
  int64_t lda, ldb;
  std::vector<float> a, b;
  std::vector<uint16_t> a16, b16;
  float a_at(const Product& p, int64_t i, int64_t k) const { return p.ta ? a[k * lda + i] : a[i * lda + k]; }
  float b_at(const Product& p, int64_t k, int64_t j) const { return p.tb ? b[j * ldb + k] : b[k * ldb + j]; }
  double a16_at(const Product& p, int64_t i, int64_t k) const {
    return float_from_bf16_bits(p.ta ? a16[k * lda + i] : a16[i * lda + k]);
  }
  double b16_at(const Product& p, int64_t k, int64_t j) const {
    return float_from_bf16_bits(p.tb ? b16[j * ldb + k] : b16[k * ldb + j]);
  }
};

Operands make_operands(const Product& p, uint32_t seed) {
  Operands o;
  o.lda = p.ta ? p.M : p.K;
  o.ldb = p.tb ? p.K : p.N;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  o.a.resize(static_cast<size_t>(p.M * p.K));
  o.b.resize(static_cast<size_t>(p.K * p.N));
  for (float& x : o.a) x = dist(gen);
  for (float& x : o.b) x = dist(gen);
  o.a16.resize(o.a.size());
  o.b16.resize(o.b.size());
  convert(o.a.data(), o.a16.data(), static_cast<int64_t>(o.a.size()));
  convert(o.b.data(), o.b16.data(), static_cast<int64_t>(o.b.size()));
  return o;
}

// The rows the reference checks: up to n of them, evenly spread, first and last included.
std::vector<int64_t> sample_rows(int64_t M, int64_t n) {
  std::vector<int64_t> rows;
  if (n >= M) {
    for (int64_t i = 0; i < M; ++i) rows.push_back(i);
    return rows;
  }
  for (int64_t t = 0; t < n; ++t) rows.push_back(t * (M - 1) / (n - 1));
  return rows;
}

// The largest |c - ref| / (|op(a)|·|op(b)|)_ij over the sampled rows, ref in
// double from the bf16-rounded inputs (bf16 = true) or from the f32 ones.
double max_rel_error(const Product& p, const Operands& o, const float* c, const std::vector<int64_t>& rows, bool bf16) {
  double worst = 0;
  std::vector<double> arow(static_cast<size_t>(p.K));
  for (int64_t i : rows) {
    for (int64_t k = 0; k < p.K; ++k) arow[k] = bf16 ? o.a16_at(p, i, k) : o.a_at(p, i, k);
    for (int64_t j = 0; j < p.N; ++j) {
      double sum = 0, scale = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        const double bk = bf16 ? o.b16_at(p, k, j) : o.b_at(p, k, j);
        sum += arow[k] * bk;
        scale += std::fabs(arow[k] * bk);
      }
      const double err = std::fabs(c[i * p.N + j] - sum);
      if (!std::isfinite(c[i * p.N + j])) return INFINITY;
      if (scale > 0) worst = std::max(worst, err / scale);
    }
  }
  return worst;
}

// γ_K: the f32 accumulation bound for K terms (u = 2^-24).
double gamma_k(int64_t K) {
  const double u = std::ldexp(1.0, -24);
  return K * u / (1 - K * u);
}

// ---------------------------------------------------------------- libraries

// One library's way of running one product: set-up done, three closures to time.
struct Variant {
  std::string name;
  std::string info;                    // the kernel it runs / why it cannot
  bool ok = false;
  std::function<void()> weight_prep;   // a weight's conversion/packing (empty: no weight)
  std::function<void()> call_prep;     // per-call conversions of the non-weight operands
  std::function<void()> kernel;        // the library call alone
  const float* out = nullptr;          // where kernel() writes c [M, N]
  std::shared_ptr<void> keep;          // buffers and handles the closures use
};

Variant make_sgemm(const Product& p, const Operands& o) {
  struct State {
    Buf<float> c;
  };
  auto s = std::make_shared<State>();
  s->c = Buf<float>(p.M * p.N);
  Variant v;
  v.name = "sgemm";
  v.info = "cblas_sgemm f32";
  v.ok = true;
  float* c = s->c.get();
  const float* a = o.a.data();
  const float* b = o.b.data();
  const int M = static_cast<int>(p.M), N = static_cast<int>(p.N), K = static_cast<int>(p.K);
  const int lda = static_cast<int>(o.lda), ldb = static_cast<int>(o.ldb);
  const CBLAS_TRANSPOSE ta = p.ta ? CblasTrans : CblasNoTrans, tb = p.tb ? CblasTrans : CblasNoTrans;
  v.kernel = [=] { cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.f, a, lda, b, ldb, 0.f, c, N); };
  v.out = c;
  v.keep = s;
  return v;
}

// The libxsmm bf16 kernel for an m x n x k block (its column-major terms), beta = 0.
libxsmm_bsmmfunction xsmm_bf16_kernel(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  const libxsmm_blasint lm = m, ln = n, lk = k, la = lda, lb = ldb, lc = ldc;
  const float one = 1.f, zero = 0.f;
  const int flags = LIBXSMM_GEMM_FLAG_VNNI_A | LIBXSMM_GEMM_FLAG_BETA_0;
  return libxsmm_bsmmdispatch(lm, ln, lk, &la, &lb, &lc, &one, &zero, &flags, nullptr);
}

// libxsmm: tile = 0 runs one kernel for the whole product, else tile x tile blocks of c.
Variant make_xsmm(const Product& p, const Operands& o, int64_t tile) {
  struct State {
    Buf<uint16_t> bv, a16;
    Buf<float> c;
    std::map<std::pair<int64_t, int64_t>, libxsmm_bsmmfunction> kernels;
  };
  auto s = std::make_shared<State>();
  Variant v;
  v.name = tile == 0 ? "xsmm" : "xsmm-tile";
  v.keep = s;
  if (p.K % 2 != 0) {
    v.info = "K odd: needs a zero pad row (not in this probe)";
    return v;
  }
  s->bv = Buf<uint16_t>(p.K * p.N);
  s->a16 = Buf<uint16_t>(p.M * p.K);
  s->c = Buf<float>(p.M * p.N);
  // Column-major view: m = N (its A = VNNI b, ld N), n = M (its B = a [M, K] row-major, ld K), C ld N.
  const int64_t nb = tile == 0 ? p.N : std::min(tile, p.N), mb = tile == 0 ? p.M : std::min(tile, p.M);
  for (int64_t j0 = 0; j0 < p.N; j0 += nb)
    for (int64_t i0 = 0; i0 < p.M; i0 += mb) {
      const std::pair<int64_t, int64_t> key{std::min(nb, p.N - j0), std::min(mb, p.M - i0)};
      if (s->kernels.count(key)) continue;
      libxsmm_bsmmfunction fn = xsmm_bf16_kernel(key.first, key.second, p.K, p.N, p.K, p.N);
      if (!fn) {
        v.info = "libxsmm_bsmmdispatch returned NULL for m=" + std::to_string(key.first) +
                 " n=" + std::to_string(key.second) + " k=" + std::to_string(p.K);
        return v;
      }
      s->kernels[key] = fn;
    }
  State* st = s.get();
  const Product q = p;
  const float* a = o.a.data();
  const float* b = o.b.data();
  const int64_t lda = o.lda, ldb = o.ldb;
  auto prep_b = [=] { pack_vnni(b, ldb, q.tb, q.K, q.N, st->bv.get()); };
  auto prep_a = [=] {
    if (q.ta)
      convert_transposed(a, lda, q.K, q.M, st->a16.get());  // a stored [K, M] -> [M, K]
    else
      convert(a, st->a16.get(), q.M * q.K);
  };
  if (p.b_weight) {
    v.weight_prep = prep_b;
    v.call_prep = prep_a;
  } else {
    v.call_prep = [=] {
      prep_a();
      prep_b();
    };
  }
  // One kernel per distinct block size; the loop walks the N blocks outside
  // (a K x nb panel of packed b stays in cache) and the M blocks inside.
  v.kernel = [=] {
    const auto* bv = reinterpret_cast<const libxsmm_bfloat16*>(st->bv.get());
    const auto* a16 = reinterpret_cast<const libxsmm_bfloat16*>(st->a16.get());
    float* c = st->c.get();
    for (int64_t j0 = 0; j0 < q.N; j0 += nb)
      for (int64_t i0 = 0; i0 < q.M; i0 += mb) {
        const libxsmm_bsmmfunction fn = st->kernels.at({std::min(nb, q.N - j0), std::min(mb, q.M - i0)});
        fn(bv + 2 * j0, a16 + i0 * q.K, c + i0 * q.N + j0);
      }
  };
  v.info = tile == 0 ? "bsmm VNNI_A, 1 call" : "bsmm VNNI_A, " + std::to_string(nb) + "x" + std::to_string(mb) + " blocks";
  v.ok = true;
  v.out = s->c.get();
  return v;
}

#ifdef PROBE_DNNL
// oneDNN matmul: any_weights = false keeps b in its plain (strided) layout,
// true lets the primitive choose and fills it with a f32 -> bf16 reorder.
Variant make_dnnl(const Product& p, const Operands& o, bool any_weights) {
  using dnnl::memory;
  using dt = memory::data_type;
  struct State {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    dnnl::stream strm{eng};
    Buf<uint16_t> a16, b16;
    Buf<uint8_t> bpacked, scratch;
    Buf<float> c;
    dnnl::matmul prim;
    dnnl::reorder b_reorder;
    std::unordered_map<int, memory> args;
    memory b_f32, b_packed;
  };
  auto s = std::make_shared<State>();
  Variant v;
  v.name = any_weights ? "dnnl-any" : "dnnl";
  v.keep = s;
  const memory::dims a_strides = p.ta ? memory::dims{1, p.M} : memory::dims{p.K, 1};
  const memory::dims b_strides = p.tb ? memory::dims{1, p.K} : memory::dims{p.N, 1};
  const memory::desc a_md({p.M, p.K}, dt::bf16, a_strides);
  const memory::desc b_md({p.K, p.N}, dt::bf16, b_strides);
  const memory::desc b_any({p.K, p.N}, dt::bf16, memory::format_tag::any);
  const memory::desc c_md({p.M, p.N}, dt::f32, memory::dims{p.N, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, any_weights ? b_any : b_md, c_md), attr, s->eng);
  } catch (const dnnl::error& e) {
    v.info = std::string("no matmul: ") + e.what();
    return v;
  }
  s->prim = dnnl::matmul(pd);
  s->a16 = Buf<uint16_t>(p.M * p.K);
  s->b16 = Buf<uint16_t>(p.K * p.N);
  s->c = Buf<float>(p.M * p.N);
  const size_t scratch_bytes = pd.scratchpad_desc().get_size();
  s->scratch = Buf<uint8_t>(static_cast<int64_t>(scratch_bytes));
  memory b_used;
  if (any_weights) {
    const memory::desc packed_md = pd.weights_desc();
    s->bpacked = Buf<uint8_t>(static_cast<int64_t>(packed_md.get_size()));
    s->b_packed = memory(packed_md, s->eng, s->bpacked.get());
    const memory::desc b_f32_md({p.K, p.N}, dt::f32, b_strides);
    s->b_f32 = memory(b_f32_md, s->eng, const_cast<float*>(o.b.data()));
    s->b_reorder = dnnl::reorder(s->b_f32, s->b_packed);
    b_used = s->b_packed;
  } else {
    b_used = memory(b_md, s->eng, s->b16.get());
  }
  s->args = {{DNNL_ARG_SRC, memory(a_md, s->eng, s->a16.get())},
             {DNNL_ARG_WEIGHTS, b_used},
             {DNNL_ARG_DST, memory(c_md, s->eng, s->c.get())},
             {DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), s->eng, s->scratch.get())}};
  State* st = s.get();
  const float* a = o.a.data();
  const float* b = o.b.data();
  const int64_t na = p.M * p.K, nbv = p.K * p.N;
  auto prep_a = [=] { convert(a, st->a16.get(), na); };  // strides carry the transpose: a plain conversion
  std::function<void()> prep_b;
  if (any_weights)
    prep_b = [=] {
      st->b_reorder.execute(st->strm, st->b_f32, st->b_packed);
      st->strm.wait();
    };
  else
    prep_b = [=] { convert(b, st->b16.get(), nbv); };
  if (p.b_weight) {
    v.weight_prep = prep_b;
    v.call_prep = prep_a;
  } else {
    v.call_prep = [=] {
      prep_a();
      prep_b();
    };
  }
  v.kernel = [=] {
    st->prim.execute(st->strm, st->args);
    st->strm.wait();
  };
  v.info = pd.impl_info_str();
  if (any_weights) v.info += pd.weights_desc() == b_md ? " (any = plain)" : " (packed b)";
  v.ok = true;
  v.out = s->c.get();
  return v;
}
#endif

// ---------------------------------------------------------------- timing

using Clock = std::chrono::steady_clock;

// Seconds per call of f, n calls in a row.
double seconds_per_call(const std::function<void()>& f, int64_t n) {
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) f();
  return std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(n);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A thing to time: its calls per repeat (so one repeat lasts min_ms) and the samples.
struct Timed {
  std::function<void()> f;
  int64_t calls = 1;
  std::vector<double> samples;
};

// Calibrates every item (one warm call, then enough calls per repeat for
// min_ms), then runs reps rounds in which each item takes its turn; returns
// the median seconds per call of each.
std::vector<double> time_all(std::vector<Timed>& items, const Options& opt) {
  for (Timed& t : items) {
    const double once = seconds_per_call(t.f, 1);
    const double s = opt.min_ms * 1e-3;
    t.calls = once >= s || once <= 0 ? 1 : std::min<int64_t>(1 << 20, static_cast<int64_t>(std::ceil(s / once)));
  }
  for (int r = 0; r < opt.reps; ++r)
    for (Timed& t : items) t.samples.push_back(seconds_per_call(t.f, t.calls));
  std::vector<double> out;
  for (Timed& t : items) out.push_back(median(t.samples));
  return out;
}

// ---------------------------------------------------------------- start-up probes

std::string cpu_line() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "?", family = "?", model = "?", flags;
  while (std::getline(in, line)) {
    auto value = [&] { return line.substr(line.find(':') + 2); };
    if (line.rfind("model name", 0) == 0 && name == "?") name = value();
    else if (line.rfind("cpu family", 0) == 0 && family == "?") family = value();
    else if (line.rfind("model\t", 0) == 0 && model == "?") model = value();
    else if (line.rfind("flags", 0) == 0 && flags.empty()) flags = " " + value() + " ";
    if (!flags.empty() && name != "?" && family != "?" && model != "?") break;
  }
  auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
  std::string out = name + " (family " + family + " model " + model + ")";
  out += has("avx512_bf16") ? ", avx512_bf16" : ", NO avx512_bf16";
  out += has("amx_bf16") ? ", amx_bf16" : ", no amx_bf16";
  return out;
}

// Which libxsmm 1.17 bf16 flag combinations dispatch a kernel, and whether
// libxsmm_bsgemm's transposes compute the right thing (printed, not assumed).
void probe_xsmm_flags() {
  const int64_t m = 32, n = 24, k = 16;  // column-major C [m, n] = A [m, k] · B [k, n]
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<uint16_t> A(m * k), B(k * n), Av(m * k), At(m * k), Bt(k * n);
  for (auto& x : A) x = bf16_bits_from_float(dist(gen));
  for (auto& x : B) x = bf16_bits_from_float(dist(gen));
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t i = 0; i < m; ++i) {
      Av[(kk / 2) * m * 2 + i * 2 + (kk & 1)] = A[i + kk * m];
      At[kk + i * k] = A[i + kk * m];
    }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t kk = 0; kk < k; ++kk) Bt[j + kk * n] = B[kk + j * k];
  std::vector<double> ref(m * n);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0;
      for (int64_t kk = 0; kk < k; ++kk) sum += double(float_from_bf16_bits(A[i + kk * m])) * float_from_bf16_bits(B[kk + j * k]);
      ref[i + j * m] = sum;
    }
  auto err = [&](const std::vector<float>& c) {
    double e = 0;
    for (int64_t i = 0; i < m * n; ++i) e = std::max(e, std::fabs(c[i] - ref[i]) / 16.0);  // |a||b| <= k = 16
    return e;
  };
  struct Case {
    const char* name;
    int flags;
    const uint16_t* a;
    int64_t lda;
    const uint16_t* b;
    int64_t ldb;
  };
  const Case cases[] = {
      {"none (plain A)", 0, A.data(), m, B.data(), k},
      {"VNNI_A", LIBXSMM_GEMM_FLAG_VNNI_A, Av.data(), m, B.data(), k},
      {"VNNI_A|BETA_0", LIBXSMM_GEMM_FLAG_VNNI_A | LIBXSMM_GEMM_FLAG_BETA_0, Av.data(), m, B.data(), k},
      {"VNNI_A|TRANS_A", LIBXSMM_GEMM_FLAG_VNNI_A | LIBXSMM_GEMM_FLAG_TRANS_A, At.data(), k, B.data(), k},
      {"VNNI_A|TRANS_B", LIBXSMM_GEMM_FLAG_VNNI_A | LIBXSMM_GEMM_FLAG_TRANS_B, Av.data(), m, Bt.data(), n},
      {"TRANS_A", LIBXSMM_GEMM_FLAG_TRANS_A, At.data(), k, B.data(), k},
      {"TRANS_B", LIBXSMM_GEMM_FLAG_TRANS_B, A.data(), m, Bt.data(), n},
      {"VNNI_A|VNNI_B", LIBXSMM_GEMM_FLAG_VNNI_A | LIBXSMM_GEMM_FLAG_VNNI_B, Av.data(), m, B.data(), k},
  };
  std::printf("# libxsmm bf16 flags (bsmmdispatch, column-major %ldx%ldx%ld; err = max|C-ref|/K):\n", long(m), long(n), long(k));
  for (const Case& cs : cases) {
    const libxsmm_blasint lm = m, ln = n, lk = k, la = cs.lda, lb = cs.ldb, lc = m;
    const float one = 1.f, zero = 0.f;
    const libxsmm_bsmmfunction fn = libxsmm_bsmmdispatch(lm, ln, lk, &la, &lb, &lc, &one, &zero, &cs.flags, nullptr);
    if (!fn) {
      std::printf("#   %-16s rejected (NULL kernel)\n", cs.name);
      continue;
    }
    std::vector<float> c(m * n, 0.f);
    fn(reinterpret_cast<const libxsmm_bfloat16*>(cs.a), reinterpret_cast<const libxsmm_bfloat16*>(cs.b), c.data());
    std::printf("#   %-16s kernel, err %.2g%s\n", cs.name, err(c), err(c) < 1e-6 ? "" : "  WRONG");
  }
  const char* trans[][2] = {{"N", "N"}, {"T", "N"}, {"N", "T"}};
  for (auto& t : trans) {
    const bool ta = t[0][0] == 'T', tb = t[1][0] == 'T';
    const libxsmm_blasint lm = m, ln = n, lk = k, la = ta ? k : m, lb = tb ? n : k, lc = m;
    const float one = 1.f, zero = 0.f;
    std::vector<float> c(m * n, 0.f);
    const uint16_t* a = ta ? At.data() : Av.data();
    const uint16_t* b = tb ? Bt.data() : B.data();
    libxsmm_bsgemm(t[0], t[1], &lm, &ln, &lk, &one, reinterpret_cast<const libxsmm_bfloat16*>(a), &la,
                   reinterpret_cast<const libxsmm_bfloat16*>(b), &lb, &zero, c.data(), &lc);
    std::printf("#   libxsmm_bsgemm(\"%s\",\"%s\") with %s A: err %.2g%s\n", t[0], t[1], ta ? "transposed" : "VNNI",
                err(c), err(c) < 1e-6 ? "" : "  WRONG");
  }
}

// ---------------------------------------------------------------- the table

std::vector<Product> products(const Options& opt) {
  std::vector<Product> out;
  if (opt.only != "attention") {
    const std::pair<int64_t, int64_t> nk[] = {{128, 128}, {512, 128}, {128, 512}, {512, 512},
                                              {1536, 512}, {2048, 512}, {512, 2048}};
    for (int64_t R : {2048, 4096})
      for (auto [N, K] : nk) {
        const std::string shape = "lin R=" + std::to_string(R) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
        out.push_back({shape, "fwd NT", R, N, K, false, true, true});
        out.push_back({shape, "dx NN", R, K, N, false, false, true});
        out.push_back({shape, "dW TN", N, K, R, true, false, false});
      }
  }
  if (opt.only != "linear") {
    for (int64_t T : {64, 128})
      for (int64_t D : {16, 32, 64}) {
        const std::string shape = "attn T=" + std::to_string(T) + " D=" + std::to_string(D);
        out.push_back({shape, "S NT", T, T, D, false, true, false});
        out.push_back({shape, "O NN", T, D, T, false, false, false});
      }
  }
  return out;
}

void run_product(const Product& p, const Options& opt, uint32_t seed) {
  const Operands o = make_operands(p, seed);
  std::vector<Variant> vs;
  vs.push_back(make_sgemm(p, o));
  vs.push_back(make_xsmm(p, o, 0));
  vs.push_back(make_xsmm(p, o, opt.tile));
#ifdef PROBE_DNNL
  vs.push_back(make_dnnl(p, o, false));
  vs.push_back(make_dnnl(p, o, true));
#endif
  // Correctness first: prepare once, run once, compare.
  const std::vector<int64_t> rows = sample_rows(p.M, opt.check_rows);
  std::vector<double> errs;
  for (Variant& v : vs) {
    if (!v.ok) {
      errs.push_back(NAN);
      continue;
    }
    if (v.weight_prep) v.weight_prep();
    if (v.call_prep) v.call_prep();
    v.kernel();
    errs.push_back(max_rel_error(p, o, v.out, rows, v.name != "sgemm"));
  }
  // Timing: kern, +conv, wprep of each working variant, all interleaved.
  std::vector<Timed> items;
  struct Slots {
    int kern = -1, full = -1, wprep = -1;
  };
  std::vector<Slots> slots(vs.size());
  for (size_t i = 0; i < vs.size(); ++i) {
    const Variant& v = vs[i];
    if (!v.ok) continue;
    slots[i].kern = static_cast<int>(items.size());
    items.push_back({v.kernel, 1, {}});
    if (v.call_prep) {
      slots[i].full = static_cast<int>(items.size());
      items.push_back({[&v] {
                         v.call_prep();
                         v.kernel();
                       },
                       1,
                       {}});
    }
    if (v.weight_prep) {
      slots[i].wprep = static_cast<int>(items.size());
      items.push_back({v.weight_prep, 1, {}});
    }
  }
  const std::vector<double> secs = time_all(items, opt);
  const double flops = 2.0 * static_cast<double>(p.M) * static_cast<double>(p.N) * static_cast<double>(p.K);
  const double t_sgemm = secs[slots[0].kern];
  const double bound = gamma_k(p.K);
  char dims[64];
  std::snprintf(dims, sizeof dims, "%ldx%ldx%ld", long(p.M), long(p.N), long(p.K));
  for (size_t i = 0; i < vs.size(); ++i) {
    const Variant& v = vs[i];
    if (!v.ok) {
      std::printf("%-24s %-7s %-15s %-9s  unavailable: %s\n", p.shape.c_str(), p.layout.c_str(), dims, v.name.c_str(),
                  v.info.c_str());
      continue;
    }
    const double tk = secs[slots[i].kern];
    const double tf = slots[i].full >= 0 ? secs[slots[i].full] : tk;
    const double tw = slots[i].wprep >= 0 ? secs[slots[i].wprep] : NAN;
    const bool pass = errs[i] <= bound;
    char wbuf[32];
    if (std::isnan(tw))
      std::snprintf(wbuf, sizeof wbuf, "%9s", "-");
    else
      std::snprintf(wbuf, sizeof wbuf, "%9.1f", tw * 1e6);
    std::printf("%-24s %-7s %-15s %-9s %9.1f %6.2f %9.1f %6.2f %s %9.2e %s  %s\n", p.shape.c_str(), p.layout.c_str(),
                dims, v.name.c_str(), flops / tk * 1e-9, t_sgemm / tk, flops / tf * 1e-9, t_sgemm / tf, wbuf, errs[i],
                pass ? "ok  " : "FAIL", v.info.c_str());
  }
  std::fflush(stdout);
}

Options parse(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("bf16_gemm_probe: " + a + " expects a value");
      return argv[++i];
    };
    if (a == "--quick") {
      opt.quick = true;
      opt.reps = 1;
      opt.min_ms = 0;
    } else if (a == "--reps") {
      opt.reps = std::stoi(next());
    } else if (a == "--min-ms") {
      opt.min_ms = std::stod(next());
    } else if (a == "--tile") {
      opt.tile = std::stoll(next());
    } else if (a == "--check-rows") {
      opt.check_rows = std::stoll(next());
    } else if (a == "--only") {
      opt.only = next();
      if (opt.only != "linear" && opt.only != "attention")
        throw std::invalid_argument("bf16_gemm_probe: --only expects linear or attention, got " + opt.only);
    } else {
      throw std::invalid_argument("bf16_gemm_probe: unknown option " + a +
                                  "; options: --quick --reps N --min-ms X --tile T --check-rows R --only linear|attention");
    }
  }
  if (opt.reps < 1 || opt.tile < 0 || opt.check_rows < 2)
    throw std::invalid_argument("bf16_gemm_probe: --reps >= 1, --tile >= 0 and --check-rows >= 2 expected");
  return opt;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options opt = parse(argc, argv);
#ifdef PROBE_DNNL
  omp_set_num_threads(1);  // before any oneDNN call: its primitives then run on this thread alone
#endif
  openblas_set_num_threads(1);
  libxsmm_init();

  std::printf("# bf16_gemm_probe  %s\n", opt.quick ? "--quick (1 call per timing: numbers are NOT measurements)" : "");
  std::printf("# cpu: %s\n", cpu_line().c_str());
  std::printf("# openblas: %s, core %s, threads %d\n", openblas_get_config(), openblas_get_corename(), openblas_get_num_threads());
  std::printf("# libxsmm: %s, target arch %s (archid %d; 1022 = cpx, the AVX512-BF16 code path)\n",
              LIBXSMM_VERSION, libxsmm_get_target_arch(), libxsmm_get_target_archid());
#ifdef PROBE_DNNL
  const dnnl_version_t* ver = dnnl_version();
  std::printf("# onednn: %d.%d.%d (%s), effective isa %s, omp_get_max_threads %d\n", ver->major, ver->minor,
              ver->patch, ver->hash, dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()), omp_get_max_threads());
#else
  std::printf("# onednn: not built in (compile with -DPROBE_DNNL -fopenmp -ldnnl)\n");
#endif
  std::printf("# timing: median of %d repeats, each >= %.1f ms of calls; single thread; libraries interleaved\n",
              opt.reps, opt.min_ms);
  probe_xsmm_flags();
  std::printf("#\n# kern = library call alone; +conv = plus per-call f32->bf16 conversion/packing of the non-weight\n"
              "# operands; x = speed-up over sgemm's kernel time; wprep = the weight's conversion/packing, us\n"
              "# (cached per optimizer step); err = max |c-ref|/(|a||b|) over %ld sampled rows, ref in double from\n"
              "# the bf16-rounded inputs (sgemm: from the f32 inputs); ok = err <= gamma_K = K*2^-24/(1-K*2^-24).\n",
              long(opt.check_rows));
  std::printf("%-24s %-7s %-15s %-9s %9s %6s %9s %6s %9s %9s %s  %s\n", "shape", "layout", "MxNxK", "library", "kern GF/s",
              "x", "+conv GF", "x", "wprep us", "err", "chk ", "impl");
  uint32_t seed = 1;
  for (const Product& p : products(opt)) run_product(p, opt, seed++);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
