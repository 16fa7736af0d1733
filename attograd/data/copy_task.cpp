#include <attograd/data/copy_task.h>

#include <algorithm>
#include <limits>
#include <unordered_set>

#include <fmt/format.h>

#include <attograd/autograd/error.h>
#include <attograd/autograd/generator.h>

namespace attograd {

namespace {

constexpr int64_t kMaxIndexedSize = int64_t{1} << 26;

struct ExampleHash {
  size_t operator()(const Example& e) const {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
    for (int64_t id : e.src) mix(static_cast<uint64_t>(id));
    mix(~uint64_t{0});  // separates src from tgt
    for (int64_t id : e.tgt) mix(static_cast<uint64_t>(id));
    return static_cast<size_t>(h);
  }
};
using ExampleSet = std::unordered_set<Example, ExampleHash>;

ExampleSet index_dataset(const Dataset& d, const char* op) {
  if (d.size() > kMaxIndexedSize)
    fail<ValueError>(op, "the training set has {} examples, more than the {} that can be indexed; hint: overlap "
                     "is only checked for finite training sets", d.size(), kMaxIndexedSize);
  ExampleSet set;
  set.reserve(static_cast<size_t>(d.size()));
  for (int64_t i = 0; i < d.size(); ++i) set.insert(d.get(i));
  return set;
}

}  // namespace

CopyTaskDataset::CopyTaskDataset(CopyTaskOptions options) : options_(options) {
  const auto& o = options_;
  if (o.num_symbols < 1) fail<ValueError>("CopyTaskDataset", "num_symbols must be >= 1, got {}", o.num_symbols);
  if (o.min_len < 1) fail<ValueError>("CopyTaskDataset", "min_len must be >= 1, got {}", o.min_len);
  if (o.min_len > o.max_len)
    fail<ValueError>("CopyTaskDataset", "min_len {} > max_len {}; hint: min_len <= max_len", o.min_len, o.max_len);
  if (o.size < 0) fail<ValueError>("CopyTaskDataset", "size must be >= 0, got {}", o.size);
}

Example CopyTaskDataset::get(int64_t i) const {
  check_example_index(i, options_.size, "CopyTaskDataset::get");
  Generator gen(mix_seed(options_.seed, static_cast<uint64_t>(i)));
  const auto span = static_cast<uint64_t>(options_.max_len - options_.min_len + 1);
  const int64_t len = options_.min_len + static_cast<int64_t>(gen.randint(span));
  Example e;
  e.src.resize(static_cast<size_t>(len));
  for (auto& id : e.src) id = kNumSpecials + static_cast<int64_t>(gen.randint(static_cast<uint64_t>(options_.num_symbols)));
  e.tgt = e.src;
  if (options_.reverse) std::reverse(e.tgt.begin(), e.tgt.end());
  return e;
}

std::string copy_symbol_name(int64_t k) {
  if (k < 0) fail<ValueError>("copy_symbol_name", "symbol index must be >= 0, got {}", k);
  if (k < 26) return std::string(1, static_cast<char>('a' + k));
  if (k < 52) return std::string(1, static_cast<char>('A' + (k - 26)));
  if (k < 62) return std::string(1, static_cast<char>('0' + (k - 52)));
  return fmt::format("s{}", k);
}

Vocab copy_task_vocab(int64_t num_symbols) {
  if (num_symbols < 1) fail<ValueError>("copy_task_vocab", "num_symbols must be >= 1, got {}", num_symbols);
  std::vector<std::string> names;
  names.reserve(static_cast<size_t>(num_symbols));
  for (int64_t k = 0; k < num_symbols; ++k) names.push_back(copy_symbol_name(k));
  return Vocab::from_symbols(names);
}

std::vector<int64_t> find_overlap(const Dataset& train, const Dataset& heldout) {
  const ExampleSet seen = index_dataset(train, "find_overlap");
  std::vector<int64_t> shared;
  for (int64_t i = 0; i < heldout.size(); ++i)
    if (seen.count(heldout.get(i))) shared.push_back(i);
  return shared;
}

VectorDataset make_disjoint_heldout(const Dataset& train, const CopyTaskOptions& heldout) {
  if (heldout.size < 0) fail<ValueError>("make_disjoint_heldout", "size must be >= 0, got {}", heldout.size);
  ExampleSet seen = index_dataset(train, "make_disjoint_heldout");
  CopyTaskOptions stream = heldout;
  stream.size = std::numeric_limits<int64_t>::max();
  const CopyTaskDataset source(stream);
  const int64_t max_draws = 100 * heldout.size + 1000;
  VectorDataset out;
  for (int64_t i = 0; out.size() < heldout.size; ++i) {
    if (i == max_draws)
      fail<ValueError>("make_disjoint_heldout", "found only {} of {} unseen examples in {} draws ({} training "
                       "examples); hint: raise max_len or num_symbols, or lower the held-out size", out.size(),
                       heldout.size, max_draws, train.size());
    Example e = source.get(i);
    if (seen.insert(e).second) out.add(std::move(e));
  }
  return out;
}

}  // namespace attograd
