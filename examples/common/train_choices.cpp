#include "examples/common/train_choices.h"

#include <algorithm>

#include <attograd/optim/adam.h>
#include <attograd/optim/sgd.h>

namespace attograd::app {

namespace {

// Every Adam row uses the Transformer's Adam settings: Vaswani et al. 2017
// ("Attention Is All You Need") §5.3 trains with beta1 = 0.9, beta2 = 0.98 and
// eps = 1e-9, where PyTorch's defaults are beta2 = 0.999, eps = 1e-8 (Kingma &
// Ba 2015). The smaller beta2 averages v over ~50 steps instead of ~1000, so
// the step size follows the gradient scale faster early in training.
optim::AdamOptions transformer_adam(const TrainOptions& o) {
  return {.lr = o.lr, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9, .weight_decay = o.weight_decay};
}

std::unique_ptr<optim::Optimizer> make_sgd(std::vector<Tensor> params, const TrainOptions& o) {
  // Momentum 0.9: He et al. 2016 ("Deep Residual Learning") §3.4, the usual SGD recipe.
  return std::make_unique<optim::SGD>(std::move(params),
                                      optim::SGDOptions{.lr = o.lr, .momentum = 0.9, .weight_decay = o.weight_decay});
}
std::unique_ptr<optim::Optimizer> make_adam(std::vector<Tensor> params, const TrainOptions& o) {
  return std::make_unique<optim::Adam>(std::move(params), transformer_adam(o));
}
std::unique_ptr<optim::Optimizer> make_adamw(std::vector<Tensor> params, const TrainOptions& o) {
  return std::make_unique<optim::AdamW>(std::move(params), transformer_adam(o));
}

constexpr OptimizerChoice kOptimizers[] = {
    {"sgd", "SGD with momentum 0.9, --weight-decay as L2", 1, make_sgd},
    {"adam", "Adam, beta2 0.98, eps 1e-9, --weight-decay as L2", 2, make_adam},
    {"adamw", "Adam with decoupled --weight-decay, beta2 0.98, eps 1e-9", 2, make_adamw},
};

void no_check(const TrainOptions&) {}

void check_cosine(const TrainOptions& t) {
  if (t.warmup >= t.steps)
    fail<ValueError>("flags", "--warmup ({}) must be smaller than --steps ({}) with the cosine schedule; hint: pass "
                     "--warmup {} (any value from 0 to {} works)", t.warmup, t.steps, t.steps / 10, t.steps - 1);
  if (t.min_lr > t.lr)
    fail<ValueError>("flags", "--min-lr ({}) must not exceed --lr ({}) with the cosine schedule; hint: pass --min-lr {} "
                     "(a hundredth of --lr) or --min-lr 0", t.min_lr, t.lr, t.lr / 100);
}

// LinearWarmup and Noam need at least one warmup step; --warmup 0 counts as 1,
// which gives the same lr for LinearWarmup and Noam's t^-0.5 decay from step 1.
int64_t at_least_one(int64_t warmup) { return std::max<int64_t>(warmup, 1); }

constexpr ScheduleChoice kSchedules[] = {
    {"constant", "--lr throughout", no_check,
     [](const TrainOptions& o, int64_t) -> std::unique_ptr<optim::Schedule> {
       return std::make_unique<optim::Constant>(o.lr);
     }},
    {"warmup", "linear warmup over --warmup steps, then --lr", no_check,
     [](const TrainOptions& o, int64_t) -> std::unique_ptr<optim::Schedule> {
       return std::make_unique<optim::LinearWarmup>(o.lr, at_least_one(o.warmup));
     }},
    {"cosine", "warmup then cosine decay to --min-lr at --steps", check_cosine,
     [](const TrainOptions& o, int64_t) -> std::unique_ptr<optim::Schedule> {
       return std::make_unique<optim::WarmupCosine>(o.lr, o.warmup, o.steps, o.min_lr);
     }},
    {"noam", "Vaswani et al. 2017 with --lr as its factor: lr * d_model^-0.5 * min(t^-0.5, t * warmup^-1.5)", no_check,
     [](const TrainOptions& o, int64_t d_model) -> std::unique_ptr<optim::Schedule> {
       return std::make_unique<optim::Noam>(d_model, at_least_one(o.warmup), o.lr);
     }},
    {"inverse-sqrt", "linear warmup to --lr over --warmup steps, then lr * sqrt(warmup / t) (fairseq's inverse_sqrt)",
     no_check,
     [](const TrainOptions& o, int64_t) -> std::unique_ptr<optim::Schedule> {
       return std::make_unique<optim::InverseSqrt>(o.lr, at_least_one(o.warmup));
     }},
    // gamma 0.1 is StepLR's default and ResNet's divide-by-10 (He et al. 2016
    // §3.4); a drop every third of the run gives two drops, as ResNet's two.
    {"step", "--lr divided by 10 after each third of --steps", no_check,
     [](const TrainOptions& o, int64_t) -> std::unique_ptr<optim::Schedule> {
       return std::make_unique<optim::StepDecay>(o.lr, std::max<int64_t>(o.steps / 3, 1), 0.1);
     }},
};

constexpr SettingChoice<OnNonfinite> kOnNonfinite[] = {
    {"stop", "end the run; the last good checkpoint stays", OnNonfinite::stop},
    {"skip", "skip the step, up to --max-consecutive-skips in a row", OnNonfinite::skip},
};

constexpr SettingChoice<dist::ReduceOrder> kReduceOrders[] = {
    {"native", "MPI_Allreduce", dist::ReduceOrder::native},
    {"fixed", "rank order; bit-identical on every rank and run", dist::ReduceOrder::fixed},
};

constexpr SettingChoice<Precision> kPrecisions[] = {
    {"f32", "float32 everywhere", Precision::f32},
    {"bf16", "matrix products in bfloat16 with float32 sums, the rest float32; needs AVX512-BF16, else float32",
     Precision::bf16},
};

}  // namespace

std::span<const OptimizerChoice> optimizer_choices() { return kOptimizers; }
std::span<const ScheduleChoice> schedule_choices() { return kSchedules; }
std::span<const SettingChoice<OnNonfinite>> nonfinite_choices() { return kOnNonfinite; }
std::span<const SettingChoice<dist::ReduceOrder>> reduce_order_choices() { return kReduceOrders; }
std::span<const SettingChoice<Precision>> precision_choices() { return kPrecisions; }

}  // namespace attograd::app
