#include <attograd/data/token_windows.h>

#include <cmath>

#include <attograd/autograd/error.h>

namespace attograd {

TokenWindows::TokenWindows(std::vector<int32_t> ids, int64_t context, double heldout_fraction)
    : ids_(std::move(ids)), context_(context) {
  const char* op = "TokenWindows";
  if (context <= 0) fail<ValueError>(op, "context must be positive, got {}", context);
  if (!(heldout_fraction > 0 && heldout_fraction < 1))
    fail<ValueError>(op, "the held-out fraction must be in (0, 1), got {}", heldout_fraction);
  const auto n = static_cast<int64_t>(ids_.size());
  split_ = n - static_cast<int64_t>(std::ceil(static_cast<double>(n) * heldout_fraction));
  const int64_t need = context + 1;
  if (split_ < need || n - split_ < need)
    fail<ValueError>(op, "the text has {} tokens: {} for training and {} held out, and each part needs one window "
                     "of context + 1 = {} tokens; hint: more text or a shorter --context (at most {})", n, split_,
                     n - split_, need, std::max<int64_t>(std::min(split_, n - split_) - 1, 0));
}

LMBatch TokenWindows::windows(const std::vector<int64_t>& starts) const {
  const auto B = static_cast<int64_t>(starts.size()), T = context_;
  std::vector<int64_t> in(static_cast<size_t>(B * T)), out(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      in[b * T + t] = ids_[starts[b] + t];
      out[b * T + t] = ids_[starts[b] + t + 1];
    }
  return {Tensor::from_vector(in, {B, T}), Tensor::from_vector(out, {B, T})};
}

LMBatch TokenWindows::sample(int64_t batch, Generator& gen) const {
  // Starts in [0, split − T − 1]: a window never reaches into the held-out tail.
  const auto starts_count = static_cast<uint64_t>(split_ - context_);
  std::vector<int64_t> starts(static_cast<size_t>(batch));
  for (auto& s : starts) s = static_cast<int64_t>(gen.next_u64() % starts_count);
  return windows(starts);
}

int64_t TokenWindows::heldout_windows() const { return (heldout_tokens() - 1) / context_; }

LMBatch TokenWindows::heldout_batch(int64_t first, int64_t count) const {
  if (first < 0 || count <= 0 || first + count > heldout_windows())
    fail<IndexError>("TokenWindows::heldout_batch", "windows [{}, {}) are outside [0, {})", first, first + count,
                     heldout_windows());
  std::vector<int64_t> starts(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) starts[i] = split_ + (first + i) * context_;
  return windows(starts);
}

}  // namespace attograd
