#include <attograd/data/loader.h>

#include <algorithm>
#include <numeric>

#include <attograd/autograd/error.h>
#include <attograd/autograd/generator.h>

namespace attograd {

namespace {

void check_ids(const std::vector<int64_t>& ids, size_t row, const char* field) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0)
      fail<ValueError>("collate", "example {} has a negative id {} at {} position {}", row, ids[i], field, i);
}

}  // namespace

Tensor causal_mask(int64_t t) {
  if (t < 0) fail<ValueError>("causal_mask", "length must be >= 0, got {}", t);
  Tensor m = Tensor::empty({t, t}, DType::b8);
  bool* p = m.data<bool>();
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j) p[i * t + j] = j > i;
  return m;
}

Batch collate(const std::vector<Example>& examples, const SpecialIds& ids, std::vector<int64_t> indices) {
  if (examples.empty()) fail<ValueError>("collate", "no examples; hint: a batch needs at least one example");
  if (!indices.empty() && indices.size() != examples.size())
    fail<ValueError>("collate", "{} indices for {} examples", indices.size(), examples.size());
  const auto b = static_cast<int64_t>(examples.size());
  int64_t s = 0, t = 0;
  for (size_t r = 0; r < examples.size(); ++r) {
    check_ids(examples[r].src, r, "src");
    check_ids(examples[r].tgt, r, "tgt");
    s = std::max(s, static_cast<int64_t>(examples[r].src.size()) + 1);
    t = std::max(t, static_cast<int64_t>(examples[r].tgt.size()) + 1);
  }
  Batch batch;
  batch.src = Tensor::empty({b, s}, DType::i64);                   // [B, S]
  batch.tgt_in = Tensor::empty({b, t}, DType::i64);                // [B, T]
  batch.tgt_out = Tensor::empty({b, t}, DType::i64);               // [B, T]
  batch.src_key_padding_mask = Tensor::empty({b, s}, DType::b8);   // [B, S]
  batch.tgt_key_padding_mask = Tensor::empty({b, t}, DType::b8);   // [B, T]
  batch.causal_mask = causal_mask(t);                              // [T, T]
  int64_t* src = batch.src.data<int64_t>();
  int64_t* tin = batch.tgt_in.data<int64_t>();
  int64_t* tout = batch.tgt_out.data<int64_t>();
  bool* smask = batch.src_key_padding_mask.data<bool>();
  bool* tmask = batch.tgt_key_padding_mask.data<bool>();
  for (int64_t r = 0; r < b; ++r) {
    const Example& e = examples[static_cast<size_t>(r)];
    const auto ns = static_cast<int64_t>(e.src.size()), nt = static_cast<int64_t>(e.tgt.size());
    int64_t* src_row = src + r * s;      // [S]: src, eos, pad...
    std::copy(e.src.begin(), e.src.end(), src_row);
    src_row[ns] = ids.eos;
    std::fill(src_row + ns + 1, src_row + s, ids.pad);
    for (int64_t j = 0; j < s; ++j) smask[r * s + j] = j > ns;
    int64_t* in_row = tin + r * t;       // [T]: bos, tgt, pad...
    in_row[0] = ids.bos;
    std::copy(e.tgt.begin(), e.tgt.end(), in_row + 1);
    std::fill(in_row + nt + 1, in_row + t, ids.pad);
    int64_t* out_row = tout + r * t;     // [T]: tgt, eos, pad...
    std::copy(e.tgt.begin(), e.tgt.end(), out_row);
    out_row[nt] = ids.eos;
    std::fill(out_row + nt + 1, out_row + t, ids.pad);
    for (int64_t j = 0; j < t; ++j) tmask[r * t + j] = j > nt;
    batch.num_tokens += nt + 1;
  }
  batch.indices = std::move(indices);
  return batch;
}

// ---- EpochBatches ---------------------------------------------------------

Batch EpochBatches::iterator::operator*() const {
  return range_->loader_->make_batch(range_->order_.get(), position_);
}

EpochBatches::iterator EpochBatches::end() const { return {this, size()}; }

int64_t EpochBatches::size() const { return loader_->batches_per_epoch(); }

// ---- DataLoader -----------------------------------------------------------

DataLoader::DataLoader(const Dataset& dataset, LoaderOptions options) : dataset_(dataset), options_(options) {
  const int64_t n = dataset_.size();
  if (options_.batch_size < 1)
    fail<ValueError>("DataLoader", "batch_size must be >= 1, got {}", options_.batch_size);
  if (n < 1) fail<ValueError>("DataLoader", "the dataset is empty (size {})", n);
  if (options_.drop_last && options_.batch_size > n)
    fail<ValueError>("DataLoader", "drop_last with batch_size {} > dataset size {} leaves no batch; hint: lower "
                     "batch_size or set drop_last=false", options_.batch_size, n);
  if (options_.shuffle && n > kMaxShuffleSize)
    fail<ValueError>("DataLoader", "cannot shuffle a dataset of size {} (limit {}); hint: use shuffle=false for "
                     "generated datasets, whose examples are random already", n, kMaxShuffleSize);
  if (options_.max_tokens < 0)
    fail<ValueError>("DataLoader", "max_tokens must be >= 0 (0: batches of batch_size rows), got {}", options_.max_tokens);
  if (options_.max_tokens > 0) plan_token_batches();
}

// Length sort, then greedy cuts: a batch grows while (rows + 1) × its longest row stays within the budget.
void DataLoader::plan_token_batches() {
  const int64_t n = dataset_.size(), budget = options_.max_tokens;
  if (n > kMaxShuffleSize)
    fail<ValueError>("DataLoader", "cannot plan token batches over {} examples (limit {})", n, kMaxShuffleSize);
  std::vector<int64_t> length(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const Example e = dataset_.get(i);
    length[static_cast<size_t>(i)] = static_cast<int64_t>(std::max(e.src.size(), e.tgt.size())) + 1;
    if (length[static_cast<size_t>(i)] > budget)
      fail<ValueError>("DataLoader", "example {} has {} tokens (with <eos>), more than max_tokens {}; hint: raise "
                       "max_tokens to at least the longest example", i, length[static_cast<size_t>(i)], budget);
  }
  by_length_.resize(static_cast<size_t>(n));
  std::iota(by_length_.begin(), by_length_.end(), int64_t{0});
  std::stable_sort(by_length_.begin(), by_length_.end(),
                   [&](int64_t a, int64_t b) { return length[static_cast<size_t>(a)] < length[static_cast<size_t>(b)]; });
  bounds_ = {0};
  int64_t rows = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t longest = length[static_cast<size_t>(by_length_[static_cast<size_t>(k)])];  // sorted: the newest is the longest
    if (rows > 0 && (rows + 1) * longest > budget) {
      bounds_.push_back(k);
      rows = 0;
    }
    ++rows;
  }
  bounds_.push_back(n);
}

int64_t DataLoader::batches_per_epoch() const {
  if (!bounds_.empty()) return static_cast<int64_t>(bounds_.size()) - 1;
  const int64_t n = dataset_.size(), bs = options_.batch_size;
  return options_.drop_last ? n / bs : n / bs + (n % bs != 0);
}

std::shared_ptr<const std::vector<int64_t>> DataLoader::order_for(int64_t epoch) const {
  if (!options_.shuffle) return nullptr;
  // With token batches the permutation is of batches (bounds_), else of examples.
  const int64_t items = bounds_.empty() ? dataset_.size() : batches_per_epoch();
  auto order = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(items));
  std::iota(order->begin(), order->end(), int64_t{0});
  Generator gen(mix_seed(options_.seed, static_cast<uint64_t>(epoch)));
  for (size_t i = order->size() - 1; i > 0; --i)  // Fisher-Yates
    std::swap((*order)[i], (*order)[gen.randint(i + 1)]);
  return order;
}

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  if (epoch < 0) fail<ValueError>("DataLoader::epoch_order", "epoch must be >= 0, got {}", epoch);
  if (!bounds_.empty()) {
    std::vector<int64_t> order;
    for (const Batch& b : epoch_batches(epoch)) order.insert(order.end(), b.indices.begin(), b.indices.end());
    return order;
  }
  if (auto order = order_for(epoch)) return *order;
  std::vector<int64_t> order(static_cast<size_t>(dataset_.size()));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

Batch DataLoader::make_batch(const std::vector<int64_t>* order, int64_t position) const {
  std::vector<int64_t> indices;
  if (!bounds_.empty()) {
    const auto k = static_cast<size_t>(order ? (*order)[static_cast<size_t>(position)] : position);
    indices.assign(by_length_.begin() + bounds_[k], by_length_.begin() + bounds_[k + 1]);
  } else {
    const int64_t n = dataset_.size(), bs = options_.batch_size;
    const int64_t begin = position * bs, end = std::min(n, begin + bs);
    for (int64_t k = begin; k < end; ++k) indices.push_back(order ? (*order)[static_cast<size_t>(k)] : k);
  }
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (const int64_t i : indices) examples.push_back(dataset_.get(i));
  return collate(examples, {options_.pad_id, options_.bos_id, options_.eos_id}, std::move(indices));
}

Batch DataLoader::batch_at(int64_t epoch, int64_t position) const {
  if (epoch < 0 || position < 0 || position >= batches_per_epoch())
    fail<ValueError>("DataLoader::batch_at", "epoch {} position {} out of range (epoch >= 0, 0 <= position < {})",
                     epoch, position, batches_per_epoch());
  if (order_ && order_epoch_ == epoch) return make_batch(order_.get(), position);
  return make_batch(order_for(epoch).get(), position);
}

Batch DataLoader::next() {
  if (options_.shuffle && (!order_ || order_epoch_ != state_.epoch)) {
    order_ = order_for(state_.epoch);
    order_epoch_ = state_.epoch;
  }
  Batch batch = make_batch(order_.get(), state_.position);
  if (++state_.position == batches_per_epoch()) state_ = {state_.epoch + 1, 0};
  return batch;
}

void DataLoader::set_state(LoaderState state) {
  if (state.epoch < 0 || state.position < 0 || state.position > batches_per_epoch())
    fail<ValueError>("DataLoader::set_state", "epoch {} position {} out of range (epoch >= 0, 0 <= position <= "
                     "{})", state.epoch, state.position, batches_per_epoch());
  state_ = state.position == batches_per_epoch() ? LoaderState{state.epoch + 1, 0} : state;
}

EpochBatches DataLoader::epoch_batches(int64_t epoch) const {
  if (epoch < 0) fail<ValueError>("DataLoader::epoch_batches", "epoch must be >= 0, got {}", epoch);
  return EpochBatches(this, order_for(epoch));
}

}  // namespace attograd
