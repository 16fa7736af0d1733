// Scaled dot-product attention: the fused op (forward, then its backward
// closure right under it), then the composite twin built from primitives.
//
// Shape legend: B batch, H query heads, G key/value heads (G divides H, R =
// H/G query heads per group), T query length, S key/value length, D query/key
// head width, Dv value head width. Per head (b, h) the fused op works on
// matrices Q [T, D], K [S, D], V [S, Dv], P [T, S], O [T, Dv], where K and V
// are those of the head's group g = h / R, addressed in place; all buffers it
// allocates are contiguous [B, H, ...] (or [B, G, ...] for dK, dV) stacks.
//
// What the fused op saves for backward: memory_options().attention
// (attograd/autograd/memory.h) chooses.
//   row_stats (default): per score row its max and 1 / Σ exp(score − max),
//           [B, H, T, 2]; backward recomputes each head's P from Q, K, the
//           masks and those numbers (FlashAttention's trade): one more GEMM
//           per head (scale·Q Kᵀ) and T·S exps, and P comes out bit for bit
//           as the forward made it (softmax_row_from_stats), so the
//           gradients equal the other choice's exactly. Q and K are kept.
//   probabilities: P [B, H, T, S] itself, B·H·T·S elements per call (what
//           the composite keeps too: its last matmul saves the softmax
//           output); backward runs four GEMMs (dV, dP, dQ, dK). Q, K are
//           kept only when another input's gradient reads them (dQ reads K,
//           dK reads Q).
// V is kept when dP is needed (dP reads V). With dropout either choice also
// keeps the keep-mask (b8, [B, H, T, S]), one byte per weight.
//
// Under bf16 autocast (autocast.h) the fused op runs its products on bf16
// copies of Q, K, V (In = BFloat16 below), which are what it keeps: each
// head's P (and dS in backward) is rounded to bf16 where it enters a product,
// every sum and the softmax stay f32, the output and gradients are f32.
//
// Higher-order gradients: while a graph is being created, the fused op falls
// back to its composite twin (differentiated by twin_backward). For that it
// also keeps handles to its inputs and options (no copies) and the
// generator's state before the dropout draws, from which the twin draws the
// same keep-mask.
#include <attograd/autograd/ops/attention.h>

#include <cmath>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <attograd/autograd/autocast.h>
#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/kernels/rows.h>
#include <attograd/autograd/memory.h>
#include <attograd/autograd/ops/dropout.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/matmul.h>
#include <attograd/autograd/ops/shape.h>
#include <attograd/autograd/ops/softmax.h>
#include <attograd/autograd/settings.h>

namespace attograd {

namespace {

constexpr std::string_view kFused = "scaled_dot_product_attention";
constexpr std::string_view kComposite = "scaled_dot_product_attention_composite";

struct Dims {
  int64_t B, H, T, S, D, Dv, G;
  int64_t group(int64_t h) const { return h / (H / G); }  // the K/V head query head h reads
};

// Every shape and dtype rule of both ops, checked once up front.
Dims check_inputs(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  if (!q.defined() || !k.defined() || !v.defined())
    fail<ValueError>(op, "q, k and v must all be defined tensors");
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    fail<ShapeError>(op, "expected rank-4 q [B, H, T, D], k [B, G, S, D], v [B, G, S, Dv], got q {}, k {}, v {}; "
                     "hint: split heads with x.reshape({{B, T, H, D}}).transpose(1, 2)",
                     shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  if (!is_floating(q.dtype()) || k.dtype() != q.dtype() || v.dtype() != q.dtype())
    fail<DTypeError>(op, "q, k, v must share one floating dtype (f32 or f64), got {}, {}, {}",
                     dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  const Dims d{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3), k.size(1)};
  if (k.size(0) != d.B || v.size(0) != d.B || v.size(1) != d.G)
    fail<ShapeError>(op, "q {}, k {}, v {} disagree on batch B or heads H (dims 0 and 1; k and v share G heads)",
                     shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  if (d.G <= 0 || d.H % d.G != 0)
    fail<ShapeError>(op, "the key/value heads G = {} (k {}) must divide the query heads H = {} (q {}); "
                     "hint: G = H is multi-head, G = 1 multi-query attention", d.G, shape_str(k.shape()), d.H,
                     shape_str(q.shape()));
  if (k.size(3) != d.D)
    fail<ShapeError>(op, "q {} and k {} must share the head width D (dim 3): {} vs {}", shape_str(q.shape()),
                     shape_str(k.shape()), d.D, k.size(3));
  if (v.size(2) != d.S)
    fail<ShapeError>(op, "k {} and v {} must share the key length S (dim 2): {} vs {}", shape_str(k.shape()),
                     shape_str(v.shape()), d.S, v.size(2));
  if (const Tensor& m = o.attn_mask; m.defined()) {
    if (m.dtype() != DType::b8 && m.dtype() != q.dtype())
      fail<DTypeError>(op, "attn_mask must be b8 (true = not allowed) or q's dtype {} (added to the scores), got {}",
                       dtype_name(q.dtype()), dtype_name(m.dtype()));
    const Shape ts{d.T, d.S}, bhts{d.B * d.H, d.T, d.S};
    if (m.shape() != ts && m.shape() != bhts)
      fail<ShapeError>(op, "attn_mask must be [T, S] = {} or [B·H, T, S] = {} for q {}, k {}, got {}", shape_str(ts),
                       shape_str(bhts), shape_str(q.shape()), shape_str(k.shape()), shape_str(m.shape()));
  }
  if (const Tensor& m = o.key_padding_mask; m.defined()) {
    if (m.dtype() != DType::b8)
      fail<DTypeError>(op, "key_padding_mask must be b8 (true at padding keys), got {}", dtype_name(m.dtype()));
    if (m.shape() != Shape{d.B, d.S})
      fail<ShapeError>(op, "key_padding_mask must be [B, S] = [{}, {}] for k {}, got {}", d.B, d.S,
                       shape_str(k.shape()), shape_str(m.shape()));
  }
  if (!(o.dropout_p >= 0 && o.dropout_p <= 1))
    fail<ValueError>(op, "dropout_p must be in [0, 1], got {}", o.dropout_p);
  if (o.dropout_p > 0 && !o.generator)
    fail<ValueError>(op, "dropout_p = {} needs a Generator; hint: set AttentionOptions::generator", o.dropout_p);
  return d;
}

double scale_of(const AttentionOptions& o, const Dims& d) {
  return o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(d.D));
}

// 1 / (1 − p), the scale of a kept weight under dropout (0 when p = 1: nothing is kept).
double keep_scale_of(const AttentionOptions& o) { return o.dropout_p < 1 ? 1.0 / (1.0 - o.dropout_p) : 0.0; }

// The (b, h) matrices [R, C] of a rank-4 x [B, H, R, C], addressed for GEMM in
// place when each is row-major (unit column stride, row stride ≥ C) or
// column-major (unit row stride: a "trans" operand). A [B, H, T, D] view of
// [B, T, H, D] data has row stride H·D — a valid leading dimension — so the
// usual split-heads transpose costs no copy; so does a K expanded over heads
// (stride 0 on H) or a KV cache with spare capacity. Any other layout is made
// contiguous once.
template <class T>
struct HeadMatrices {
  Tensor owner;             // x, or its contiguous copy
  const T* data = nullptr;  // element [0, 0, 0, 0]
  int64_t sb = 0, sh = 0;   // strides of B and H
  int64_t ld = 1;
  bool trans = false;       // stored column-major
  const T* at(int64_t b, int64_t h) const { return data + b * sb + h * sh; }
};

template <class T>
HeadMatrices<T> head_matrices(const Tensor& x) {
  const int64_t R = x.size(2), C = x.size(3), sr = x.strides()[2], sc = x.strides()[3];
  const int64_t r1 = std::max<int64_t>(R, 1), c1 = std::max<int64_t>(C, 1);
  HeadMatrices<T> m;
  m.owner = x;
  if ((C <= 1 || sc == 1) && (R <= 1 || sr >= c1)) {
    m.ld = R <= 1 ? c1 : sr;
  } else if ((R <= 1 || sr == 1) && (C <= 1 || sc >= r1)) {
    m.ld = C <= 1 ? r1 : sc;
    m.trans = true;
  } else {
    NoGradGuard no_grad;
    m.owner = x.contiguous();
    m.ld = c1;
  }
  const Tensor& owner = m.owner;
  m.data = owner.data<T>();
  m.sb = owner.strides()[0];
  m.sh = owner.strides()[1];
  return m;
}

// x as the products read it: x itself, or its bf16 copy under autocast.
template <class In>
Tensor operand(const Tensor& x) {
  if constexpr (std::is_same_v<In, BFloat16>) return bf16_rounded(x);
  else return x;
}

// n values x as a product's operand: x itself when In is T (scale is then
// the product's alpha), else scale · x rounded to bf16 in `scratch`.
template <class In, class T>
const In* as_operand(std::vector<In>& scratch, const T* x, int64_t n, T scale) {
  if constexpr (std::is_same_v<In, T>) {
    return x;
  } else {
    scratch.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) scratch[i] = In(scale * x[i]);
    return scratch.data();
  }
}

// A gradient [B, N, L, C] for input x of that shape, stored like x when x is
// the split-heads view of [B, L, N, C] data (x.reshape({B, L, N, C}).transpose(1, 2)),
// else contiguous: then the transpose and reshape that made x pass the
// gradient back as views, with no copy. The (b, n) matrix [L, C] starts at
// at(b, n) with row stride ld.
template <class T>
struct HeadGrad {
  Tensor t;
  T* data = nullptr;
  int64_t sb = 0, sn = 0, ld = 0;
  T* at(int64_t b, int64_t n) const { return data + b * sb + n * sn; }
};

template <class T>
HeadGrad<T> head_grad_like(const Tensor& x) {
  const int64_t B = x.size(0), N = x.size(1), L = x.size(2), C = x.size(3);
  const bool split_heads = x.strides() == Shape{L * N * C, C, N * C, 1};
  HeadGrad<T> g;
  if (split_heads) {
    const Tensor blnc = Tensor::empty({B, L, N, C}, dtype_of<T>());
    g.t = make_view(blnc, {B, N, L, C}, {L * N * C, C, N * C, 1}, 0);
    g.data = blnc.data<T>();
    g.sb = L * N * C, g.sn = C, g.ld = N * C;
  } else {
    g.t = Tensor::empty({B, N, L, C}, dtype_of<T>());
    g.data = g.t.template data<T>();
    g.sb = N * L * C, g.sn = L * C, g.ld = C;
  }
  return g;
}

// The masks as contiguous arrays, and where head bh finds its [T, S] block.
template <class T>
struct Masks {
  Tensor attn, padding;           // owners (contiguous)
  const bool* attn_bool = nullptr;  // [T, S] or [B·H, T, S]
  const T* attn_add = nullptr;      // [T, S] or [B·H, T, S]
  int64_t attn_head_stride = 0;     // 0 for [T, S], T·S for [B·H, T, S]
  const bool* pad = nullptr;        // [B, S]
  bool causal = false;
};

template <class T>
Masks<T> gather_masks(const AttentionOptions& o, const Dims& d) {
  NoGradGuard no_grad;
  Masks<T> m;
  m.causal = o.is_causal;
  if (o.attn_mask.defined()) {
    const Tensor attn = o.attn_mask.contiguous();
    m.attn = attn;
    m.attn_head_stride = attn.dim() == 3 ? d.T * d.S : 0;
    if (attn.dtype() == DType::b8) m.attn_bool = attn.data<bool>();
    else m.attn_add = attn.data<T>();
  }
  if (o.key_padding_mask.defined()) {
    const Tensor pad = o.key_padding_mask.contiguous();
    m.padding = pad;
    m.pad = pad.data<bool>();
  }
  return m;
}

// The masks of head (b, bh) applied to its score row t [S]. This is where
// every mask enters: BEFORE the softmax, a float mask is added and a masked
// position's score is set to -∞, so exp gives it exactly 0 weight and the
// other keys renormalize among themselves.
template <class T>
void mask_row(T* row, int64_t t, int64_t b, int64_t bh, const Dims& d, const Masks<T>& m) {
  const int64_t S = d.S;
  const bool* am = m.attn_bool ? m.attn_bool + bh * m.attn_head_stride + t * S : nullptr;
  const T* add = m.attn_add ? m.attn_add + bh * m.attn_head_stride + t * S : nullptr;
  const bool* pad = m.pad ? m.pad + b * S : nullptr;
  if (add)
    for (int64_t s = 0; s < S; ++s) row[s] += add[s];
  if (am)
    for (int64_t s = 0; s < S; ++s) if (am[s]) row[s] = -INFINITY;
  if (pad)
    for (int64_t s = 0; s < S; ++s) if (pad[s]) row[s] = -INFINITY;
  if (m.causal)
    for (int64_t s = t + 1; s < S; ++s) row[s] = -INFINITY;
}

// One head's scores p [T, S] (scale·QKᵀ on entry) become its softmax
// probabilities, masked first (mask_row); stats [T, 2] (or null) gets each
// row's statistics, max and inv (SoftmaxRowStats). A row with every score -∞
// has no softmax: its probabilities are all 0 (see backward).
template <class T>
void mask_and_softmax(T* p, T* stats, int64_t b, int64_t bh, const Dims& d, const Masks<T>& m) {
  for (int64_t t = 0; t < d.T; ++t) {
    T* row = p + t * d.S;
    mask_row(row, t, b, bh, d, m);
    const SoftmaxRowStats<T> st = softmax_row(row, row, d.S);  // the softmax op's kernel; a fully masked row gives 0
    if (stats) stats[2 * t] = st.max, stats[2 * t + 1] = st.inv;
  }
}

// The same probabilities again from the scores and the saved row statistics
// (backward under AttentionSaves::row_stats): equal to mask_and_softmax's bit for bit.
template <class T>
void mask_and_softmax_again(T* p, const T* stats, int64_t b, int64_t bh, const Dims& d, const Masks<T>& m) {
  for (int64_t t = 0; t < d.T; ++t) {
    T* row = p + t * d.S;
    mask_row(row, t, b, bh, d, m);
    softmax_row_from_stats(row, row, d.S, SoftmaxRowStats<T>{stats[2 * t], stats[2 * t + 1]});
  }
}

// out [n] = keep ? p · scale : 0
template <class T>
void apply_keep(T* out, const T* p, const bool* keep, int64_t n, T scale) {
  for (int64_t i = 0; i < n; ++i) out[i] = keep[i] ? p[i] * scale : T(0);
}

// What the fused op's backward keeps besides its saved tensors (see the top
// of the file for the choice; record() holds the tensors, see Buffers).
struct Saved {
  Dims d;
  double scale = 1, keep_scale = 1;
  bool mask_learns = false;  // a float attn_mask that requires grad: input 3
  Shape mask_shape;          // its shape, when it learns
  AttentionOptions opts;         // without generator, need_weights and the masks (those are saved tensors)
  Generator::State gen_state{};  // before the dropout draws
};

// The saved tensors the backward kernel reads: registered with record() (so
// the graph's pictures show them) and read back from the node by name.
struct Buffers {
  Tensor P;          // [B, H, T, S] softmax probabilities (AttentionSaves::probabilities), or undefined
  Tensor row_stats;  // [B, H, T, 2] each row's max and 1/Σ (AttentionSaves::row_stats), or undefined
  Tensor keep;       // [B, H, T, S] b8 dropout keep-mask (undefined without dropout)
  Tensor q, k, v;    // [B, H, ·, ·] GEMM-addressable, each only when backward reads it
  Tensor q_in, k_in, v_in;            // the inputs as given: their gradients take their layouts
  Tensor attn_mask, key_padding_mask;  // the masks as given (row_stats re-applies them)
};

// Each buffer's name on the node (to_dot, BackwardTrace). The table's order
// is the node's saved order; both directions below go through it, so nothing
// else has to agree with it by position.
constexpr std::pair<std::string_view, Tensor Buffers::*> kBufferNames[] = {
    {"P", &Buffers::P},
    {"row_stats", &Buffers::row_stats},
    {"keep", &Buffers::keep},
    {"q", &Buffers::q},
    {"k", &Buffers::k},
    {"v", &Buffers::v},
    {"q_in", &Buffers::q_in},
    {"k_in", &Buffers::k_in},
    {"v_in", &Buffers::v_in},
    {"attn_mask", &Buffers::attn_mask},
    {"key_padding_mask", &Buffers::key_padding_mask}};
static_assert(std::size(kBufferNames) * sizeof(Tensor) == sizeof(Buffers), "every Buffers field needs a name");

// buf as record()'s saved list, in kBufferNames' order.
std::vector<SavedTensor> saved_list(const Buffers& buf) {
  std::vector<SavedTensor> list;
  for (const auto& [name, field] : kBufferNames) list.push_back({std::string(name), buf.*field, std::nullopt});
  return list;
}

// The node's saved tensors back in their fields (backward's side of saved_list).
Buffers buffers_from(const Grads& dx) {
  Buffers buf;
  for (size_t i = 0; i < std::size(kBufferNames); ++i) buf.*kBufferNames[i].second = dx.saved(i);
  return buf;
}

// What the forward writes, [B, H, T, ·] each; undefined when not wanted.
struct Forward {
  Tensor out;        // [B, H, T, Dv], a view of a contiguous [B, T, H, Dv] buffer (see attention_forward)
  Tensor P;          // [B, H, T, S] probabilities, kept whole when backward or the caller reads them
  Tensor row_stats;  // [B, H, T, 2] each row's [max, inv], when backward recomputes P from them
  Tensor keep;       // [B, H, T, S] b8 dropout keep-mask Z ≠ 0
  Tensor dropped;    // [B, H, T, S] P ⊙ Z, when the caller reads the weights under dropout
};

// Per head (b, h): P [T, S] = softmax(scale · Q Kᵀ, masked), then
// O [T, Dv] = P V, or (P ⊙ Z) V with dropout. Heads are independent: the pool
// takes them in ranges of (b, h). A head's P lives in f.P when that is kept
// whole, else in a per-thread [T, S] scratch.
template <class T, class In>
void attention_forward_heads(const HeadMatrices<In>& Q, const HeadMatrices<In>& K, const HeadMatrices<In>& V,
                             const Masks<T>& masks, const Dims& d, T scale, T keep_scale, const Forward& f) {
  const int64_t H = d.H, T_ = d.T, S = d.S, D = d.D, Dv = d.Dv, TS = T_ * S;
  const bool dropping = f.keep.defined();
  T* const out_data = f.out.data<T>();  // element [0, 0, 0, 0] of the [B, T, H, Dv] buffer
  parallel_for(d.B * H, 1, [&](int64_t first, int64_t last) {
    std::vector<T> scratch(dropping && !f.dropped.defined() ? TS : 0);  // P ⊙ Z [T, S]
    std::vector<T> head_p(f.P.defined() ? 0 : TS);                      // P [T, S] when not kept whole
    std::vector<In> low;                                                // the mix as a bf16 operand
    for (int64_t bh = first; bh < last; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      T* p = f.P.defined() ? f.P.data<T>() + bh * TS : head_p.data();
      T* stats = f.row_stats.defined() ? f.row_stats.data<T>() + bh * T_ * 2 : nullptr;
      // P [T, S] = scale · Q Kᵀ (K of the head's group), then masks and softmax in place
      gemm(p, Q.at(b, h), K.at(b, d.group(h)), T_, S, D, Q.trans, !K.trans, Q.ld, K.ld, S, scale, T(0));
      mask_and_softmax(p, stats, b, bh, d, masks);
      const T* mix = p;
      if (dropping) {
        T* w = f.dropped.defined() ? f.dropped.data<T>() + bh * TS : scratch.data();
        apply_keep(w, p, f.keep.data<bool>() + bh * TS, TS, keep_scale);
        mix = w;
      }
      // O [T, Dv] = P V   ((P ⊙ Z) V with dropout)
      gemm(out_data + (b * T_ * H + h) * Dv, as_operand(low, mix, TS, T(1)), V.at(b, d.group(h)), T_, Dv, S, false,
           V.trans, S, V.ld, H * Dv, T(1), T(0));
    }
  });
}

// The forward's buffers, the dropout draws, then every head. save_p: keep P
// whole for backward; save_stats: keep the row statistics instead.
template <class T, class In>
Forward attention_forward(const HeadMatrices<In>& Q, const HeadMatrices<In>& K, const HeadMatrices<In>& V,
                          const AttentionOptions& o, const Dims& d, bool save_p, bool save_stats) {
  const int64_t B = d.B, H = d.H, T_ = d.T, S = d.S;
  const DType dt = dtype_of<T>();
  const bool dropping = o.dropout_p > 0;
  Forward f;
  if (save_p || o.need_weights) f.P = Tensor::empty({B, H, T_, S}, dt);
  if (save_stats) f.row_stats = Tensor::empty({B, H, T_, 2}, dt);
  // out [B, H, T, Dv] is a view of a contiguous [B, T, H, Dv] buffer, so the
  // usual head merge (transpose(1, 2) + reshape to [B, T, H·Dv]) is a view too.
  const Tensor out_bthd = Tensor::empty({B, T_, H, d.Dv}, dt);
  f.out = make_view(out_bthd, {B, H, T_, d.Dv}, {T_ * H * d.Dv, d.Dv, H * d.Dv, 1}, 0);
  if (dropping) f.keep = Tensor::empty({B, H, T_, S}, DType::b8);
  if (dropping && o.need_weights) f.dropped = Tensor::empty({B, H, T_, S}, dt);
  // The keep draws follow ops/dropout exactly (gen.uniform() >= p, one per
  // weight in [B, H, T, S] row-major order), so the composite, which calls
  // dropout() on its softmax, draws the same mask from the same seed.
  if (dropping) {
    bool* z = f.keep.data<bool>();
    for (int64_t i = 0, n = f.keep.numel(); i < n; ++i) z[i] = o.generator->uniform() >= o.dropout_p;
  }
  attention_forward_heads<T, In>(Q, K, V, gather_masks<T>(o, d), d, static_cast<T>(scale_of(o, d)),
                             static_cast<T>(keep_scale_of(o)), f);
  return f;
}

// What backward needs besides the tensors: the dims, the scales and the
// options, without the generator (its state instead) and the masks (saved).
Saved backward_state(const AttentionOptions& o, const Dims& d, Generator::State gen_state) {
  Saved sv;
  sv.d = d;
  sv.scale = scale_of(o, d);
  sv.keep_scale = keep_scale_of(o);
  sv.mask_learns = o.attn_mask.defined() && o.attn_mask.requires_grad();
  if (sv.mask_learns) sv.mask_shape = o.attn_mask.shape();
  sv.opts = o;
  sv.opts.generator = nullptr;
  sv.opts.need_weights = false;
  sv.opts.attn_mask = Tensor();
  sv.opts.key_padding_mask = Tensor();
  sv.gen_state = gen_state;
  return sv;
}

template <class T, class In>
void attention_backward(const Saved& sv, const Buffers& buf, const Tensor& grad, Grads& dx);
void attention_twin_backward(const Saved& sv, const Buffers& buf, const Tensor& grad, Grads& dx);

// T: the dtype of q, k, v and of every sum; In: the products' operands (T,
// or BFloat16 under autocast, when T is float).
template <class T, class In>
AttentionResult fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
                                const Dims& d) {
  const bool mask_learns = o.attn_mask.defined() && o.attn_mask.requires_grad();
  const bool recorded = any_requires_grad({q, k, v}) || (mask_learns && GradMode::enabled());
  const bool keep_p = memory_options().attention == AttentionSaves::probabilities;
  const HeadMatrices<In> Q = head_matrices<In>(operand<In>(q)), K = head_matrices<In>(operand<In>(k)),
                         V = head_matrices<In>(operand<In>(v));
  const Generator::State gen_state = o.dropout_p > 0 ? o.generator->state() : Generator::State{};  // before the draws
  const Forward f = attention_forward<T, In>(Q, K, V, o, d, recorded && keep_p, recorded && !keep_p);

  AttentionResult res;
  // The weights the caller reads: P ⊙ Z under dropout, else P (a copy when backward keeps P: never alias it).
  if (o.need_weights) res.weights = f.dropped.defined() ? f.dropped : (recorded && keep_p ? f.P.clone() : f.P);
  if (!recorded) {
    res.out = f.out;
    return res;
  }
  // q, k, v: the GEMM operands (dK reads Q, dQ reads K, dP reads V; recomputing
  // P reads Q and K); *_in and the masks: the inputs as given, handles for the
  // composite twin and for recomputing P. Under autocast the bf16 copies
  // stand for the inputs too, so the f32 inputs need not outlive the forward.
  const bool need_dp = q.requires_grad() || k.requires_grad() || mask_learns;
  const bool low = !std::is_same_v<In, T>;
  const Buffers saved{.P = keep_p ? f.P : Tensor(),
                      .row_stats = f.row_stats,
                      .keep = f.keep,
                      .q = k.requires_grad() || !keep_p ? Q.owner.detach() : Tensor(),
                      .k = q.requires_grad() || !keep_p ? K.owner.detach() : Tensor(),
                      .v = need_dp ? V.owner.detach() : Tensor(),
                      .q_in = low ? Q.owner.detach() : q.detach(),
                      .k_in = low ? K.owner.detach() : k.detach(),
                      .v_in = low ? V.owner.detach() : v.detach(),
                      .attn_mask = o.attn_mask.defined() ? o.attn_mask.detach() : Tensor(),
                      .key_padding_mask = o.key_padding_mask};
  res.out = record(kFused, f.out, {q, k, v, mask_learns ? o.attn_mask : Tensor()}, saved_list(saved),
                   [sv = backward_state(o, d, gen_state)](const Tensor& grad, Grads& dx) {
    // Forward, per head:  S = scale · Q Kᵀ + M;  P = softmax(S) row-wise;  O = P V.
    //
    //   O = P V             =>  dV = Pᵀ dO,   dP = dO Vᵀ
    //   P = softmax(S)      =>  dS = P ⊙ (dP − rowsum(dP ⊙ P))
    //   S = scale · Q Kᵀ    =>  dQ = scale · dS K,   dK = scale · dSᵀ Q
    //   S = ... + M (float) =>  dM = dS   (summed over heads for a [T, S] mask)
    //
    // Grouped K/V: K and V of group g enter the R = H/G heads h of that group,
    // so dK_g = Σ_h dK_h and dV_g = Σ_h dV_h over those heads.
    //
    // Dropout: O = (P ⊙ Z) V with Z = keep / (1 − p). Then dV = (P ⊙ Z)ᵀ dO,
    // and the gradient reaching P passes through the same mask:
    // dP = (dO Vᵀ) ⊙ Z — dropped weights get none, kept ones are scaled by
    // 1/(1 − p); the softmax step is unchanged.
    //
    // Masked positions. A masked score was -∞, so its P is exactly 0, and
    // dS = P ⊙ (...) is exactly 0 there: no gradient flows into a masked
    // score, and the bool masks, the padding mask and the causal structure are
    // constants that get none. A fully masked row has P = 0 everywhere: its dS
    // row is 0, so it adds nothing to dQ, dK or dV, and nothing divides by its
    // empty softmax sum (no NaN). Only a float mask that requires grad receives
    // dM = dS, which is 0 at its -∞ entries for the same reason.
    const Buffers buf = buffers_from(dx);
    if (dx.create_graph()) attention_twin_backward(sv, buf, grad, dx);
    else attention_backward<T, In>(sv, buf, grad, dx);
  });
  return res;
}

// The create_graph path: the composite twin on the inputs as given (and the
// same dropout draws, from the saved generator state), differentiated by
// twin_backward, so the gradients can be differentiated again.
void attention_twin_backward(const Saved& sv, const Buffers& buf, const Tensor& grad, Grads& dx) {
  const Tensor mask_in = sv.mask_learns ? buf.attn_mask : Tensor();
  // Under autocast the inputs were kept as bf16 copies: the twin runs on them widened to f32, under the
  // precision the forward ran in (its matmuls round where the fused op rounded).
  const bool low = buf.q_in.dtype() == DType::bf16;
  const AutocastGuard as_forward(low ? Precision::bf16 : Precision::f32);
  const auto wide = [](const Tensor& t) { return t.dtype() == DType::bf16 ? t.to(DType::f32) : t; };
  twin_backward(dx, grad,
                {dx.input(0, wide(buf.q_in)), dx.input(1, wide(buf.k_in)), dx.input(2, wide(buf.v_in)),
                 dx.input(3, mask_in)},
                [&](const std::vector<Tensor>& x) {
                  AttentionOptions twin = sv.opts;
                  twin.attn_mask = buf.attn_mask;
                  twin.key_padding_mask = buf.key_padding_mask;
                  Generator gen;
                  gen.set_state(sv.gen_state);
                  if (twin.dropout_p > 0) twin.generator = &gen;
                  if (x[3].defined()) twin.attn_mask = x[3];
                  return scaled_dot_product_attention_composite(x[0], x[1], x[2], twin).out;
                });
}

// The backward kernel, per head (see the derivation in fused_attention).
template <class T, class In>
void attention_backward(const Saved& sv, const Buffers& buf, const Tensor& grad, Grads& dx) {
  const int64_t B = sv.d.B, H = sv.d.H, T_ = sv.d.T, S = sv.d.S, D = sv.d.D, Dv = sv.d.Dv, G = sv.d.G;
  const int64_t TS = T_ * S, R = H / G;
  const T scale = static_cast<T>(sv.scale), keep_scale = static_cast<T>(sv.keep_scale);
  const bool dropping = buf.keep.defined(), need_dp = dx.needs(0) || dx.needs(1) || dx.needs(3);
  const HeadMatrices<In> dO = head_matrices<In>(operand<In>(grad));  // dO [T, Dv] per head
  const bool recompute = !buf.P.defined();
  Masks<T> masks;
  if (recompute) {
    AttentionOptions mo = sv.opts;
    mo.attn_mask = buf.attn_mask;
    mo.key_padding_mask = buf.key_padding_mask;
    masks = gather_masks<T>(mo, sv.d);
  }
  HeadMatrices<In> Q, K, V;
  if (buf.q.defined()) Q = head_matrices<In>(buf.q);
  if (buf.k.defined()) K = head_matrices<In>(buf.k);
  if (buf.v.defined()) V = head_matrices<In>(buf.v);
  // In bf16, scale goes into dS before it is rounded (gemm_bf16's fast kernel takes alpha = 1 when it adds).
  const T ds_alpha = std::is_same_v<In, T> ? scale : T(1);
  const DType dt = grad.dtype();
  // dQ [B, H, T, D], dK [B, G, S, D], dV [B, G, S, Dv], each laid out like its input
  const HeadGrad<T> dq = dx.needs(0) ? head_grad_like<T>(buf.q_in) : HeadGrad<T>{};
  const HeadGrad<T> dk = dx.needs(1) ? head_grad_like<T>(buf.k_in) : HeadGrad<T>{};
  const HeadGrad<T> dv = dx.needs(2) ? head_grad_like<T>(buf.v_in) : HeadGrad<T>{};
  Tensor dm = dx.needs(3) ? Tensor::zeros(sv.mask_shape, dt) : Tensor();  // [T, S] or [B·H, T, S]
  const int64_t dm_head_stride = sv.mask_shape.size() == 3 ? TS : 0;

  // Groups in parallel (a group's heads add into its one dK, dV in turn),
  // except when every head adds into one shared [T, S] dM.
  const int64_t grain = dx.needs(3) && dm_head_stride == 0 ? B * G : 1;
  parallel_for(B * G, grain, [&](int64_t first, int64_t last) {
    std::vector<T> ds(need_dp ? TS : 0);                       // dP, then dS, [T, S]
    std::vector<T> pz(dropping && dx.needs(2) ? TS : 0);       // P ⊙ Z [T, S]
    std::vector<T> head_p(recompute ? TS : 0);                 // P [T, S], recomputed
    std::vector<In> low_mix, low_ds;                           // P ⊙ Z and scale · dS as bf16 operands
    for (int64_t bh = first * R; bh < last * R; ++bh) {  // the heads of groups [first, last)
      const int64_t b = bh / H, h = bh % H, g = h / R;
      const T acc = h % R == 0 ? T(0) : T(1);  // the group's first head writes dK, dV; the others add
      const T* p = recompute ? head_p.data() : buf.P.data<T>() + bh * TS;
      if (recompute) {
        // P [T, S] as the forward made it: the same GEMM, masks, then exp(score − max) · inv per row
        gemm(head_p.data(), Q.at(b, h), K.at(b, g), T_, S, D, Q.trans, !K.trans, Q.ld, K.ld, S, scale, T(0));
        mask_and_softmax_again(head_p.data(), buf.row_stats.data<T>() + bh * T_ * 2, b, bh, sv.d, masks);
      }
      const bool* z = dropping ? buf.keep.data<bool>() + bh * TS : nullptr;
      if (dx.needs(2)) {
        const T* mix = p;
        if (dropping) {
          apply_keep(pz.data(), p, z, TS, keep_scale);
          mix = pz.data();
        }
        // dV_g [S, Dv] += (P ⊙ Z)ᵀ dO
        gemm(dv.at(b, g), as_operand(low_mix, mix, TS, T(1)), dO.at(b, h), S, Dv, T_, true, dO.trans, S, dO.ld, dv.ld,
             T(1), acc);
      }
      if (!need_dp) continue;
      // dP [T, S] = (dO Vᵀ) ⊙ Z
      gemm(ds.data(), dO.at(b, h), V.at(b, g), T_, S, Dv, dO.trans, !V.trans, dO.ld, V.ld, S, T(1), T(0));
      if (dropping) apply_keep(ds.data(), ds.data(), z, TS, keep_scale);
      // dS = P ⊙ (dP − rowsum(dP ⊙ P)), over dP in place; 0 wherever P is 0
      for (int64_t t = 0; t < T_; ++t) softmax_backward_row(ds.data() + t * S, ds.data() + t * S, p + t * S, S);
      if (dx.needs(3)) {
        T* m = dm.data<T>() + bh * dm_head_stride;
        for (int64_t i = 0; i < TS; ++i) m[i] += ds[i];
      }
      if (!dx.needs(0) && !dx.needs(1)) continue;
      const In* dsx = as_operand(low_ds, ds.data(), TS, scale);  // ds itself, or bf16(scale · dS)
      // dQ [T, D] = scale · dS K
      if (dx.needs(0))
        gemm(dq.at(b, h), dsx, K.at(b, g), T_, D, S, false, K.trans, S, K.ld, dq.ld, ds_alpha, T(0));
      // dK_g [S, D] += scale · dSᵀ Q
      if (dx.needs(1))
        gemm(dk.at(b, g), dsx, Q.at(b, h), S, D, T_, true, Q.trans, S, Q.ld, dk.ld, ds_alpha, acc);
    }
  });
  if (dx.needs(0)) dx[0] += dq.t;
  if (dx.needs(1)) dx[1] += dk.t;
  if (dx.needs(2)) dx[2] += dv.t;
  if (dx.needs(3)) dx[3] += dm;
}

// [T, S] b8, true where s > t: the keys a causal query may not see.
Tensor causal_mask(int64_t T_, int64_t S) {
  std::vector<bool> m(static_cast<size_t>(T_ * S));
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t s = t + 1; s < S; ++s) m[static_cast<size_t>(t * S + s)] = true;
  return Tensor::from_vector(m, {T_, S});
}

// x [B, G, S, C] -> [B, H, S, C], each K/V head repeated for the H/G query
// heads of its group (torch.repeat_interleave(x, H/G, dim=1)); x itself when G = H.
Tensor repeat_kv_heads(const Tensor& x, const Dims& d) {
  if (d.G == d.H) return x;
  const int64_t S = x.size(2), C = x.size(3);
  return reshape(expand(unsqueeze(x, 2), {d.B, d.G, d.H / d.G, S, C}), {d.B, d.H, S, C});
}

}  // namespace

// scaled_dot_product_attention: q [B, H, T, D], k [B, G, S, D], v [B, G, S, Dv] -> out [B, H, T, Dv]
AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionOptions& o) {
  const Dims d = check_inputs(kFused, q, k, v, o);
  return dispatch_float(q.dtype(), kFused, [&]<class T>() {
    if constexpr (std::is_same_v<T, float>)
      if (autocast_to_bf16(q.dtype())) return fused_attention<float, BFloat16>(q, k, v, o, d);
    return fused_attention<T, T>(q, k, v, o, d);
  });
}

// The same attention from primitives, each recording its own node:
//   k, v repeated to H heads                  [B, H, S, ·]
//   scores = matmul(q, kᵀ) · scale            [B, H, T, S]
//   masks: add (float) / masked_fill(-∞) (bool, padding, causal)
//   out = matmul(dropout(softmax(scores)), v) [B, H, T, Dv]
AttentionResult scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const AttentionOptions& o) {
  const Dims d = check_inputs(kComposite, q, k, v, o);
  const Tensor kh = repeat_kv_heads(k, d), vh = repeat_kv_heads(v, d);  // [B, H, S, ·]
  Tensor scores = matmul(q, transpose(kh, -2, -1)) * scale_of(o, d);
  if (const Tensor& m = o.attn_mask; m.defined()) {
    const Tensor mb = m.dim() == 3 ? reshape(m, {d.B, d.H, d.T, d.S}) : m;
    scores = m.dtype() == DType::b8 ? masked_fill(scores, mb, -INFINITY) : add(scores, mb);
  }
  if (o.key_padding_mask.defined())
    scores = masked_fill(scores, reshape(o.key_padding_mask, {d.B, 1, 1, d.S}), -INFINITY);
  if (o.is_causal) scores = masked_fill(scores, causal_mask(d.T, d.S), -INFINITY);
  Tensor w = softmax(scores, -1);  // a fully masked row gives 0 weights and 0 gradient
  if (o.dropout_p > 0) w = dropout(w, o.dropout_p, /*train=*/true, *o.generator);
  AttentionResult res;
  res.out = matmul(w, vh);
  if (o.need_weights) res.weights = w.detach();
  return res;
}

}  // namespace attograd
