#include <attograd/data/dataset.h>

#include <attograd/autograd/error.h>

namespace attograd {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t mix_seed(uint64_t seed, uint64_t stream) { return splitmix64(splitmix64(seed) ^ stream); }

void check_example_index(int64_t i, int64_t size, const char* op) {
  if (i < 0 || i >= size)
    fail<IndexError>(op, "index {} out of range for a dataset of size {}", i, size);
}

Example VectorDataset::get(int64_t i) const {
  check_example_index(i, size(), "VectorDataset::get");
  return examples_[static_cast<size_t>(i)];
}

}  // namespace attograd
