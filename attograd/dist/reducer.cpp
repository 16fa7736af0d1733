#include <attograd/dist/reducer.h>

#include <algorithm>
#include <chrono>

#include <attograd/autograd/error.h>

namespace attograd::dist {
namespace {

std::vector<int64_t> flat_offsets(const char* op, const std::vector<Tensor>& params) {
  std::vector<int64_t> offsets{0};
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].dtype() != DType::f32)
      fail<DTypeError>(op, "parameter {} is {}, expected f32", i, dtype_name(params[i].dtype()));
    offsets.push_back(offsets.back() + params[i].numel());
  }
  return offsets;
}

int64_t bucket_elements(const char* op, int64_t bucket_bytes) {
  const auto elements = bucket_bytes / static_cast<int64_t>(sizeof(float));
  if (elements < 1) fail<ValueError>(op, "bucket_bytes must be at least {}, got {}", sizeof(float), bucket_bytes);
  return elements;
}

// Calls f(tensor, tensor_first, flat_first, n) for each part of the flat range
// [begin, end) that lies in one tensor.
template <class F>
void for_each_piece(const std::vector<Tensor>& ts, const std::vector<int64_t>& offsets, int64_t begin, int64_t end,
                    F f) {
  auto i = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin() - 1);
  for (int64_t at = begin; at < end; ++i) {
    const int64_t stop = std::min(end, offsets[i + 1]);
    if (stop > at) f(ts[i], at - offsets[i], at - begin, stop - at);
    at = std::max(at, stop);
  }
}

// The contiguous f32 grad of a leaf, zeros (and set) when it has none.
Tensor dense_grad(Tensor p) {
  Tensor g = p.grad();
  if (!g.defined()) g = Tensor::zeros(p.shape());
  else if (g.is_contiguous() && g.dtype() == DType::f32) return g;
  else g = g.contiguous().to(DType::f32);
  p.set_grad(g);
  return g;
}

}  // namespace

GradientReducer::GradientReducer(Communicator& comm, std::vector<Tensor> params, ReducerOptions options)
    : comm_(comm), params_(std::move(params)), offsets_(flat_offsets("GradientReducer", params_)), options_(options) {
  const int64_t cap = std::min(bucket_elements("GradientReducer", options.bucket_bytes), offsets_.back());
  if (comm_.size() == 1) return;
  if (!options.overlap) {
    bucket_.resize(static_cast<size_t>(cap));
    if (options.order == ReduceOrder::fixed) gathered_.resize(static_cast<size_t>(cap * comm_.size()));
    return;
  }
  buckets_of_.resize(params_.size());
  final_.assign(params_.size(), false);
  for (int64_t begin = 0; begin < offsets_.back(); begin += cap) {
    Bucket& b = buckets_.emplace_back();
    b.begin = begin;
    b.end = std::min(begin + cap, offsets_.back());
    b.values.resize(static_cast<size_t>(b.end - b.begin));
    if (options.order == ReduceOrder::fixed) b.gathered.resize(b.values.size() * static_cast<size_t>(comm_.size()));
  }
  for (size_t i = 0; i < params_.size(); ++i)
    for (size_t k = 0; k < buckets_.size(); ++k)
      if (buckets_[k].begin < offsets_[i + 1] && offsets_[i] < buckets_[k].end) buckets_of_[i].push_back(k);
  reset_overlap();
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.push_back(register_post_accumulate_grad_hook(params_[i], [this, i](const Tensor&) { on_final(i); }));
}

void GradientReducer::reset_overlap() {
  for (Bucket& b : buckets_) {
    b.running.reset();  // waits for one a skipped step left running
    b.pending = 0;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    final_[i] = false;
    for (size_t k : buckets_of_[i]) ++buckets_[k].pending;
  }
  started_ = 0;
}

void GradientReducer::on_final(size_t param) {
  const auto t0 = std::chrono::steady_clock::now();
  if (final_[param]) reset_overlap();  // a new backward, and the last one's sums were never collected
  final_[param] = true;
  for (size_t k : buckets_of_[param]) --buckets_[k].pending;
  const size_t before = started_;
  start_ready();
  overlapped_ += static_cast<int64_t>(started_ - before);
  for (size_t k = buckets_.size() - started_; k < buckets_.size(); ++k)
    if (buckets_[k].running) buckets_[k].running->test();  // lets MPI move the started ones on
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Starts the next buckets in the fixed order (the last first) while they are ready.
void GradientReducer::start_ready() {
  while (started_ < buckets_.size() && buckets_[buckets_.size() - 1 - started_].pending == 0)
    start(buckets_[buckets_.size() - 1 - started_++]);
}

void GradientReducer::start(Bucket& b) {
  for_each_piece(params_, offsets_, b.begin, b.end, [&](const Tensor& p, int64_t at, int64_t to, int64_t n) {
    const Tensor g = dense_grad(p);
    std::copy_n(g.span<float>().begin() + at, n, b.values.begin() + to);
  });
  if (options_.order == ReduceOrder::fixed) b.running = comm_.iallgather(b.values, b.gathered);
  else b.running = comm_.iallreduce_sum(b.values);
  ++calls_;
}

int64_t GradientReducer::num_buckets() const {
  const int64_t cap = bucket_elements("GradientReducer", options_.bucket_bytes);
  return (offsets_.back() + cap - 1) / cap;
}

void GradientReducer::reduce_fixed_order(std::span<float> bucket) {
  const size_t n = bucket.size();
  std::span<float> all(gathered_.data(), n * static_cast<size_t>(comm_.size()));
  comm_.allgather(bucket, all);
  std::copy_n(all.begin(), n, bucket.begin());
  for (size_t r = 1; r < static_cast<size_t>(comm_.size()); ++r)
    for (size_t j = 0; j < n; ++j) bucket[j] += all[r * n + j];
}

void GradientReducer::allreduce(ReduceOp op) {
  if (comm_.size() == 1) return;
  if (!options_.overlap) return allreduce_blocking(op);
  const auto t0 = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) b.pending = 0;  // what backward did not reach counts as zeros
  start_ready();
  const float scale = op == ReduceOp::mean ? 1.0f / static_cast<float>(comm_.size()) : 1.0f;
  for (size_t j = 0; j < buckets_.size(); ++j) {  // in the order they started
    Bucket& b = buckets_[buckets_.size() - 1 - j];
    const auto w0 = std::chrono::steady_clock::now();
    b.running->wait();
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    b.running.reset();
    if (!b.gathered.empty()) {  // fixed: the ranks' values added in rank order, as reduce_fixed_order does
      const size_t n = b.values.size();
      std::copy_n(b.gathered.begin(), n, b.values.begin());
      for (size_t r = 1; r < static_cast<size_t>(comm_.size()); ++r)
        for (size_t e = 0; e < n; ++e) b.values[e] += b.gathered[r * n + e];
    }
    for_each_piece(params_, offsets_, b.begin, b.end, [&](const Tensor& p, int64_t at, int64_t to, int64_t n) {
      float* out = p.grad().span<float>().data() + at;
      for (int64_t e = 0; e < n; ++e) out[e] = b.values[static_cast<size_t>(to + e)] * scale;
    });
  }
  reset_overlap();
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradientReducer::allreduce_blocking(ReduceOp op) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Tensor> grads;
  grads.reserve(params_.size());
  for (const Tensor& p : params_) grads.push_back(dense_grad(p));
  const int64_t cap = static_cast<int64_t>(bucket_.size());
  const float scale = op == ReduceOp::mean ? 1.0f / static_cast<float>(comm_.size()) : 1.0f;
  for (int64_t begin = 0; begin < offsets_.back(); begin += cap) {
    const int64_t end = std::min(begin + cap, offsets_.back());
    std::span<float> bucket(bucket_.data(), static_cast<size_t>(end - begin));
    for_each_piece(grads, offsets_, begin, end, [&](const Tensor& g, int64_t at, int64_t to, int64_t n) {
      std::copy_n(g.span<float>().begin() + at, n, bucket.begin() + to);
    });
    if (options_.order == ReduceOrder::fixed) reduce_fixed_order(bucket);
    else comm_.allreduce_sum(bucket);
    ++calls_;
    for_each_piece(grads, offsets_, begin, end, [&](const Tensor& g, int64_t at, int64_t to, int64_t n) {
      float* out = g.span<float>().data() + at;
      for (int64_t j = 0; j < n; ++j) out[j] = bucket[static_cast<size_t>(to + j)] * scale;
    });
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void broadcast_parameters(Communicator& comm, const std::vector<Tensor>& params, int64_t bucket_bytes) {
  if (comm.size() == 1) return;
  const std::vector<int64_t> offsets = flat_offsets("broadcast_parameters", params);
  for (const Tensor& p : params)
    if (!p.is_contiguous()) fail<ValueError>("broadcast_parameters", "every parameter must be contiguous");
  const int64_t cap = std::min(bucket_elements("broadcast_parameters", bucket_bytes), offsets.back());
  std::vector<float> bucket(static_cast<size_t>(cap));
  for (int64_t begin = 0; begin < offsets.back(); begin += cap) {
    const int64_t end = std::min(begin + cap, offsets.back());
    std::span<float> b(bucket.data(), static_cast<size_t>(end - begin));
    for_each_piece(params, offsets, begin, end, [&](const Tensor& t, int64_t at, int64_t to, int64_t n) {
      std::copy_n(t.span<float>().begin() + at, n, b.begin() + to);
    });
    comm.broadcast(b, 0);
    for_each_piece(params, offsets, begin, end, [&](const Tensor& t, int64_t at, int64_t to, int64_t n) {
      std::copy_n(b.begin() + to, n, t.span<float>().begin() + at);
    });
  }
  for (const Tensor& p : params) p.bump_version();  // rank 0's values replaced every rank's
}

}  // namespace attograd::dist
