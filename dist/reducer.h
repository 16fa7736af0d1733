// Data-parallel gradient averaging: every parameter's .grad summed (or
// averaged) over the ranks of a Communicator, in fixed-size buckets.
//
// The gradients are laid end to end, in parameter order, as one flat f32
// array; bucket k is its elements [k * cap, (k + 1) * cap) with
// cap = bucket_bytes / 4, so a large parameter spans several buckets and
// small ones share one. Each bucket is copied into a pooled flat buffer
// (allocated once, at construction), reduced with one collective, and copied
// back: one call per bucket, never one per parameter. No call at all in a
// world of one.
//
// Reduction order:
//  - native: MPI_Allreduce, whose algorithm (and so the order of the float
//    additions) OpenMPI picks by message size and process count. Runs with the
//    same process count and bucket size repeat bit for bit in practice, but MPI
//    does not promise it, nor that every rank gets the same bits.
//  - fixed: MPI_Allgather of the bucket, then every rank adds the ranks'
//    values in rank order 0, 1, ..., N-1 itself. The sums are bit-identical on
//    every rank and from run to run, for a given process count; the cost is
//    N * bucket bytes received per rank instead of a ring's 2(N-1)/N.
// Neither makes N processes bit-identical to one process with the N-times
// batch: there the GEMMs of the backward sum the batch rows in one
// accumulation, here in N partial sums added afterwards.
#pragma once
#include <cstdint>
#include <vector>

#include <attograd/autograd/tensor.h>
#include <attograd/dist/communicator.h>

namespace attograd::dist {

enum class ReduceOrder { native, fixed };
enum class ReduceOp { sum, mean };

struct ReducerOptions {
  // 1 MiB: large enough that the per-call latency is small next to the
  // transfer (a few microseconds per call on one machine), small enough that
  // the pooled buffers stay small. PyTorch DDP uses 25 MiB buckets to
  // overlap communication with its GPU backward, which attograd does not do.
  int64_t bucket_bytes = int64_t{1} << 20;
  ReduceOrder order = ReduceOrder::native;
};

class GradientReducer {
 public:
  // params: f32 leaves in the same order on every rank. ValueError for another
  // dtype or a bucket smaller than one float.
  GradientReducer(Communicator& comm, std::vector<Tensor> params, ReducerOptions options = {});
  // Every parameter's .grad becomes the sum (or mean) over ranks; an undefined
  // .grad counts as zeros and is set.
  void allreduce(ReduceOp op);
  int64_t num_buckets() const;
  int64_t calls() const { return calls_; }  // collectives made so far
  double seconds() const { return seconds_; }  // wall time spent in them (packing included)

 private:
  void reduce_fixed_order(std::span<float> bucket);

  Communicator& comm_;
  std::vector<Tensor> params_;
  std::vector<int64_t> offsets_;  // params_[i]'s first element in the flat array; back() is the total
  ReducerOptions options_;
  std::vector<float> bucket_, gathered_;  // the pooled buffers
  int64_t calls_ = 0;
  double seconds_ = 0;
};

// Every parameter takes rank 0's values (at the start of a run, so all ranks
// begin from the same weights), in buckets as above.
void broadcast_parameters(Communicator& comm, const std::vector<Tensor>& params,
                          int64_t bucket_bytes = ReducerOptions{}.bucket_bytes);

}  // namespace attograd::dist
