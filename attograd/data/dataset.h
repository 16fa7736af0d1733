// Datasets: indexable collections of (source, target) id sequences.
//
// An Example holds raw token ids with NO special tokens; the loader's collate
// adds <eos> (and <bos> for the decoder input), see attograd/data/loader.h. A dataset
// is random-access and const: get(i) must be a pure function of i, so a
// loader can shuffle, resume and re-read any example. File-backed datasets
// (e.g. a TSV of sentence pairs) either subclass Dataset or fill a
// VectorDataset once at load time.
#pragma once
#include <cstdint>
#include <vector>

namespace attograd {

// One source/target pair of token ids.
struct Example {
  std::vector<int64_t> src;  // source ids, no <bos>/<eos>
  std::vector<int64_t> tgt;  // target ids, no <bos>/<eos>
  // Equal ids on both sides.
  bool operator==(const Example&) const = default;
};

// Random access to examples: what a DataLoader reads.
class Dataset {
 public:
  virtual ~Dataset() = default;
  // Number of examples.
  virtual int64_t size() const = 0;
  // Example i for 0 <= i < size(); throws IndexError otherwise.
  virtual Example get(int64_t i) const = 0;
};

// Examples held in memory.
class VectorDataset : public Dataset {
 public:
  VectorDataset() = default;
  // Holds examples, in order.
  explicit VectorDataset(std::vector<Example> examples) : examples_(std::move(examples)) {}
  // Number of examples held.
  int64_t size() const override { return static_cast<int64_t>(examples_.size()); }
  Example get(int64_t i) const override;
  // Appends e as example size().
  void add(Example e) { examples_.push_back(std::move(e)); }
  // Every example, in order.
  const std::vector<Example>& examples() const { return examples_; }

 private:
  std::vector<Example> examples_;
};

// Throws IndexError "<op>: index i out of range for a dataset of size n".
void check_example_index(int64_t i, int64_t size, const char* op);

// A 64-bit seed for stream `stream` of a run seeded with `seed` (e.g. the
// shuffle of epoch e, or example i of a generated dataset). For a fixed seed,
// distinct streams give distinct values (a composition of bijections).
uint64_t mix_seed(uint64_t seed, uint64_t stream);

}  // namespace attograd
