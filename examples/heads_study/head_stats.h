// What each attention head does, measured: attention statistics (entropy,
// distance, mass on the previous token, itself, the first position, the best
// fixed offset, and an induction score), the loss a head costs when it is removed (ablation),
// Michel et al.'s gate importance, and losses under a mask of removed heads.
// One implementation for any model: the tools reach every MultiHeadAttention
// below a Module root through attention observers (AttentionObserver in
// attograd/nn/attention.h), and the caller supplies the loss (LossBatches).
// The Seq2SeqTransformer overloads at the end are thin wrappers (the heads
// study); examples/head_probe uses the generic ones on GPT.
//
// Shape legend: B batch, H heads, T query length, S key length, V target vocab.
//   weights [B, H, T, S]: one softmax row per query (a fully masked row is all 0)
//   query_padding [B, T] b8, key_padding [B, S] b8: true at padding (may be undefined)
//   tokens [B, T] i64: the tokens at the query positions of a self-attention (T = S)
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <attograd/nn/module.h>
#include <attograd/nn/transformer.h>

namespace attograd::app::heads {

struct HeadStat {
  std::string module;  // "decoder.layers.0.cross_attn"
  int64_t head = 0;
  double entropy = 0;        // mean over query rows of -Σ_s p log p (nats); 0 = one key, log S = uniform
  double uniform_entropy = 0;  // mean over the same rows of log(number of visible keys): the ceiling
  double mean_distance = 0;  // mean over rows of Σ_s p·|t - s| (positions); 0 = attends to its own position
  double max_weight = 0;     // mean over rows of max_s p: how peaked the head is
  int64_t rows = 0;          // query rows counted (padding queries and fully masked rows are skipped)
  double previous = 0;       // mean over rows of p(s = t - 1) (rows with t = 0 count 0)
  double self = 0;           // mean over rows of p(s = t)
  // Mean over rows of p(s = t + 1) (rows with no key t + 1 count 0): 0 under a
  // causal mask; in a model trained without one, the head that reads ahead.
  double next = 0;
  double first = 0;          // mean over rows of p(s = 0)
  // Olsson et al. 2022's induction score, with tokens: mean over rows of the
  // mass on keys s ≥ 1 with tokens[s-1] = tokens[t] and s - 1 < t (the token
  // after an earlier occurrence of the current one); 0 without tokens.
  double induction = 0;
  // The same mass under uniform attention over each row's visible keys: the chance level.
  double induction_chance = 0;
  // For cross-attention (meaningful where keys are another sequence): mean over
  // rows of p(s = S_b - 1), the last unpadded key (a source's <eos>, often a
  // "no-op" sink), S_b the row's unpadded keys.
  double last = 0;
  // Mean over rows of the mass on keys within ±1 of round(t·S_b/T_b), T_b the
  // sequence's unpadded queries: how much a head follows a monotone diagonal.
  double diagonal = 0;
  // The best fixed offset (Clark et al. 2019's baseline for a head that reads
  // "the token k back"): the k = t - s with 2 <= |k| <= kMaxOffset whose mean
  // mass over rows, p(s = t - k) (rows without that key count 0), is largest
  // (a tie keeps the nearer, then the one behind), and that mass. Offsets 1, 0
  // and -1 are previous, self and next.
  int64_t offset = 0;
  double offset_mass = 0;
};

// The farthest offset HeadStat::offset considers.
inline constexpr int64_t kMaxOffset = 8;

// Which rows and keys of one attention module's weights count (see add).
struct AttentionRows {
  Tensor query_padding, key_padding;  // [B, T], [B, S] b8, or undefined
  Tensor tokens;                      // [B, T] i64 for a self-attention's induction score, or undefined
  bool causal = false;                // query t sees keys s <= t only
};

// Accumulates statistics over batches, per (module, head).
class HeadStatistics {
 public:
  // weights [B, H, T, S] (any float dtype); the paddings mark rows and keys
  // that are not counted; `causal` says query t sees only keys s <= t (for
  // the uniform-entropy ceiling and the induction chance); tokens [B, T]
  // (T = S) give the induction score.
  void add(const std::string& module, const Tensor& weights, const Tensor& query_padding = Tensor(),
           const Tensor& key_padding = Tensor(), bool causal = false, const Tensor& tokens = Tensor());
  // Runs forward() in eval mode without gradients, with an observer on every
  // attention module below model that adds its weights with rows(module name).
  void add_forward(Module& model, const std::function<AttentionRows(const std::string& module)>& rows,
                   const std::function<void()>& forward);
  // add_forward on one batch of a Seq2SeqTransformer: encoder self, decoder
  // self (causal) and decoder cross attention, each with its paddings; with
  // induction_tokens (tgt_in), the decoder self-attention's induction score.
  void add_batch(Seq2SeqTransformer& model, const Tensor& src, const Tensor& tgt_in, const Tensor& src_key_padding_mask,
                 const Tensor& tgt_key_padding_mask, bool induction_tokens = false);
  // One entry per (module, head), modules in the order they were first added.
  std::vector<HeadStat> results() const;

 private:
  struct Sums {
    double entropy = 0, uniform = 0, distance = 0, max_weight = 0, previous = 0, self = 0, next = 0, first = 0,
           induction = 0, induction_chance = 0, last = 0, diagonal = 0;
    std::array<double, 2 * kMaxOffset + 1> at_offset{};  // [k + kMaxOffset]: mass on s = t - k
    int64_t rows = 0;
  };
  std::vector<std::string> order_;
  std::map<std::string, std::vector<Sums>> sums_;
};

// One batch's loss as the head tools need it.
struct BatchLoss {
  Tensor sum;         // scalar: the loss summed over the tokens it counts (in the graph when grad mode is on)
  double tokens = 0;  // how many tokens sum counts
};

// The caller's loss over a fixed set of batches: loss(i), 0 <= i < batches,
// runs the model's forward on batch i and returns its BatchLoss. The tools
// call it in eval mode, with grad mode on only for head_importance.
struct LossBatches {
  size_t batches = 0;
  std::function<BatchLoss(size_t i)> loss;
};

// Σ_i sum_i / Σ_i tokens_i over every batch (eval mode, no gradients): the
// mean loss per token with the heads as the observers leave them.
double heads_loss(Module& model, const LossBatches& data);

// Which heads are kept, per attention module (names as attention_modules
// gives them): one factor per head, 1 kept, 0 removed.
using HeadMask = std::map<std::string, std::vector<double>>;

// Every head of every attention module kept.
HeadMask full_head_mask(const Module& model);
// The heads the mask removes, over all modules.
int64_t removed_heads(const HeadMask& mask);

// For its lifetime, each attention module of the mask multiplies head h's
// output by mask[module][h] before out_proj (AttentionCall::head_scale), in
// every forward, incremental decoding included. Earlier observers come back
// after. Removing every head of a module leaves its residual path.
class HeadMaskGuard {
 public:
  // Scales in the dtype of model's first parameter.
  HeadMaskGuard(Module& model, const HeadMask& mask);

 private:
  std::map<std::string, Tensor> scales_;  // [H] per module, in the model's dtype
  AttentionObserverGuard guard_;
};

// heads_loss with the mask's heads removed.
double masked_loss(Module& model, const LossBatches& data, const HeadMask& mask);

struct HeadAblation {
  std::string module;
  int64_t head = 0;
  double loss = 0;   // mean loss per token with this head removed
  double delta = 0;  // loss - baseline loss
};

// Each head removed in turn (the others kept), one entry per head of every
// attention module in attention_modules order; *baseline (when given) gets the
// loss with every head kept. The modules' observers are left as they were.
std::vector<HeadAblation> ablate_heads(Module& model, const LossBatches& data, double* baseline = nullptr);

struct HeadImportance {
  std::string module;
  int64_t head = 0;
  double importance = 0;  // mean over batches of |∂L/∂ξ_h| (ξ_h: the head's gate, at its mask value)
  double normalized = 0;  // importance / the L2 norm of its module's importances (Michel et al. 2019, §4.1)
};

// Head importance as Michel, Levy & Neubig (2019) define it: each batch's mean
// loss L = sum / tokens (eval mode) is differentiated with respect to a gate
// ξ_h on every head's output, one backward per batch. Heads the mask removed
// sit at ξ_h = 0 and are scored there. Parameters' .grad are not touched. One
// entry per (module, head), in attention_modules order.
std::vector<HeadImportance> head_importance(Module& model, const LossBatches& data, const HeadMask& mask);

// A head by module name and index.
using HeadRef = std::pair<std::string, int64_t>;

// The loss after removing the first k heads of `order` (the rest kept), for
// each k of ks (each in [0, order.size()]); a mask met before (the same
// heads removed) is measured once, through *cache when given.
std::vector<double> pruning_curve(Module& model, const LossBatches& data, const std::vector<HeadRef>& order,
                                  const std::vector<int64_t>& ks, std::map<std::string, double>* cache = nullptr);

// The heads sorted by score (one per head), lowest first; ties keep their order in heads.
std::vector<HeadRef> ascending_order(const std::vector<HeadRef>& heads, const std::vector<double>& score);
// The heads in a random order drawn from Generator(seed) by Fisher-Yates: the same on every platform.
std::vector<HeadRef> random_order(std::vector<HeadRef> heads, uint64_t seed);

// ---- Seq2SeqTransformer (the heads study) --------------------------------------------------

struct AblationBatch {
  Tensor src, tgt_in, tgt_out, src_key_padding_mask;  // as attograd/data/loader.h's Batch
  // As Batch's, or undefined: it matters only to a decoder without the causal
  // mask, whose rows would otherwise see the padding after their sentence.
  Tensor tgt_key_padding_mask;
};

// Teacher-forced cross-entropy of the batches (pad_id targets not counted), as
// LossBatches; model and batches must outlive it.
LossBatches seq2seq_loss(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches, int64_t pad_id);

// heads_loss on seq2seq_loss: the mean cross-entropy per target token.
double masked_heads_loss(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches, int64_t pad_id);
// ablate_heads on seq2seq_loss.
std::vector<HeadAblation> ablate_heads(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches,
                                       int64_t pad_id, double* baseline = nullptr);
// head_importance on seq2seq_loss.
std::vector<HeadImportance> head_importance(Seq2SeqTransformer& model, const std::vector<AblationBatch>& batches,
                                            int64_t pad_id, const HeadMask& mask);

}  // namespace attograd::app::heads
