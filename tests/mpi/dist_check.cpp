// Run by tests/test_dist_mpi.cpp under `mpirun -np 2`:
//   dist_check collectives   broadcast, bucketed sums and means, the fixed
//                            order's bit-identical sums, gathered bytes;
//                            prints "dist_check: ok" or fails
//   dist_check overlap       gradients reduced during backward equal, bit for
//                            bit, those reduced after it (both orders)
//   dist_check raise         rank 1 fails on a file while rank 0 waits in a
//                            collective: the job must end with one line
#include <cstring>
#include <numeric>

#include <attograd/autograd/error.h>
#include <attograd/autograd/autograd.h>
#include <attograd/dist/communicator.h>
#include <attograd/dist/reducer.h>
#include <fmt/format.h>

#include "examples/common/cli.h"

using namespace attograd;
using namespace attograd::app;
using namespace attograd::dist;

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) fail<Error>("dist_check", "{}", what);
}

// Leaves of 3, 300 and 7 elements, each grad element `scale` times its flat index + 1.
std::vector<Tensor> leaves(float scale) {
  std::vector<Tensor> ps;
  int64_t next = 1;
  for (int64_t n : {3, 300, 7}) {
    std::vector<double> g(static_cast<size_t>(n));
    for (double& v : g) v = scale * static_cast<double>(next++);
    Tensor p = Tensor::full({n}, scale).requires_grad_();
    p.set_grad(Tensor::from_vector(g, {n}));
    ps.push_back(p);
  }
  return ps;
}

void collectives(Communicator& comm) {
  check(comm.size() == 2, fmt::format("expected 2 ranks, got {}", comm.size()));
  const auto r = static_cast<float>(comm.rank());

  std::vector<Tensor> ps = leaves(r + 1);
  broadcast_parameters(comm, ps, 64);
  for (const Tensor& p : ps)
    for (double v : p.to_vector<double>()) check(v == 1.0, fmt::format("broadcast gave {}, expected rank 0's 1", v));

  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
    ps = leaves(r + 1);  // rank 0: i, rank 1: 2i; sum 3i, mean 1.5i (exact in f32)
    GradientReducer reducer(comm, ps, {.bucket_bytes = 256});
    reducer.allreduce(op);
    check(reducer.calls() == reducer.num_buckets() && reducer.num_buckets() == 5,
          fmt::format("{} calls for {} buckets, expected 5", reducer.calls(), reducer.num_buckets()));
    int64_t i = 1;
    for (const Tensor& p : ps)
      for (double v : p.grad().to_vector<double>()) {
        const double want = (op == ReduceOp::sum ? 3.0 : 1.5) * static_cast<double>(i++);
        check(v == want, fmt::format("allreduce gave {} at {}, expected {}", v, i - 1, want));
      }
  }

  // Random grads: the fixed order gives g0 + g1 in that order, the same bits on both ranks.
  Generator gens[2] = {Generator(11), Generator(12)};
  const Tensor g0 = Tensor::randn({1000}, gens[0]), g1 = Tensor::randn({1000}, gens[1]);
  Tensor p = Tensor::zeros({1000}).requires_grad_();
  p.set_grad(Tensor::from_vector((comm.rank() == 0 ? g0 : g1).to_vector<double>(), {1000}));  // a copy: reduced in place
  GradientReducer fixed(comm, {p}, {.bucket_bytes = 1024, .order = ReduceOrder::fixed});
  fixed.allreduce(ReduceOp::sum);
  const auto got = p.grad().span<float>(), a = g0.span<float>(), b = g1.span<float>();
  for (size_t j = 0; j < got.size(); ++j)
    check(got[j] == a[j] + b[j], fmt::format("fixed order gave {} at {}, expected {}", got[j], j, a[j] + b[j]));
  const std::vector<std::string> bits =
      comm.allgather_bytes(std::string(reinterpret_cast<const char*>(got.data()), got.size_bytes()));
  check(bits.size() == 2 && bits[0] == bits[1], "the fixed order's sums differ between the ranks");
  const auto names = comm.allgather_bytes(fmt::format("rank{}", comm.rank()));
  check(names == std::vector<std::string>{"rank0", "rank1"}, "allgather_bytes lost the rank order");
  comm.barrier();
  fmt::print("dist_check: ok\n");
}

// Two copies of a small MLP, the same weights, rank-dependent inputs: one
// reduced after backward (blocking), one with the collectives started during
// backward (overlap). With 2 ranks both orders must give the same bits.
void overlap(Communicator& comm) {
  check(comm.size() == 2, fmt::format("expected 2 ranks, got {}", comm.size()));
  for (ReduceOrder order : {ReduceOrder::native, ReduceOrder::fixed}) {
    std::vector<std::vector<Tensor>> models(2);
    for (auto& ps : models) {
      Generator gen(5);  // the same weights in both copies and on both ranks
      for (Shape s : {Shape{64, 32}, Shape{64}, Shape{64, 64}, Shape{64}, Shape{8, 64}, Shape{8}})
        ps.push_back(Tensor::randn(s, gen).requires_grad_());
    }
    Generator data(100 + static_cast<uint64_t>(comm.rank()));
    const Tensor x = Tensor::randn({16, 32}, data);
    GradientReducer blocking(comm, models[0], {.bucket_bytes = 4096, .order = order, .overlap = false});
    GradientReducer overlapped(comm, models[1], {.bucket_bytes = 4096, .order = order});
    for (int step = 0; step < 3; ++step) {
      for (size_t m = 0; m < 2; ++m) {
        const auto& p = models[m];
        Tensor h = relu(linear(relu(linear(x, p[0], p[1])), p[2], p[3]));
        sum(tanh(linear(h, p[4], p[5]))).backward();
      }
      check(overlapped.overlapped() > 0, "no bucket started during backward");
      blocking.allreduce(ReduceOp::mean);
      overlapped.allreduce(ReduceOp::mean);
      for (size_t i = 0; i < models[0].size(); ++i) {
        const auto a = models[0][i].grad().span<float>(), b = models[1][i].grad().span<float>();
        check(std::equal(a.begin(), a.end(), b.begin()),
              fmt::format("{} order, step {}: parameter {} differs between the blocking and the overlapped reducer",
                          order == ReduceOrder::fixed ? "fixed" : "native", step, i));
      }
      for (auto& ps : models)
        for (Tensor& p : ps) p.zero_grad();
    }
    fmt::print("dist_check: rank {}: {} order: {} of {} collectives started during backward\n", comm.rank(),
               order == ReduceOrder::fixed ? "fixed" : "native", overlapped.overlapped(), overlapped.calls());
  }
  comm.barrier();
  fmt::print("dist_check: ok\n");
}

void raise_on_rank_one(Communicator& comm) {
  if (comm.rank() == 1) fail<IOError>("data", "cannot read /nonexistent/train.tsv: No such file or directory");
  double x = 1;
  comm.allreduce_sum(std::span<double>(&x, 1));  // never completes: rank 1 does not join
  fmt::print("dist_check: rank 0 was not stopped\n");
}

}  // namespace

int main(int argc, char** argv) {
  return cli::guarded_main("dist_check", [&] {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "collectives") collectives(world());
    else if (mode == "raise") raise_on_rank_one(world());
    else if (mode == "overlap") overlap(world());
    else fail<ValueError>("flags", "usage: dist_check collectives|overlap|raise, got '{}'", mode);
    return 0;
  });
}
