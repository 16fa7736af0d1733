// Elementwise templates shared by the op files, on Tensors (the raw-pointer
// kernels under them are in attograd/autograd/kernels/). They compute values only; the
// op files wrap them with record() to join the graph.
//
//   map<T>(x, f)        out[i] = f(x[i])                   out: x's shape, contiguous
//   zip<T>(op, a, b, f) out[i] = f(a[i'], b[i''])          out: broadcast(a, b), contiguous
//
// Both read any strides (views, expanded operands) and write a fresh
// contiguous tensor; the contiguous same-shape case is one flat loop, split
// across the thread pool when it is long, so f must be a pure function.
#pragma once
#include <string_view>

#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/kernels/add.h>
#include <attograd/autograd/tensor.h>
#include <attograd/autograd/tensor_impl.h>

namespace attograd {

template <class T, class F>
Tensor map(const Tensor& x, F f, DType out_dtype = dtype_of<T>()) {
  Tensor out = Tensor::empty(x.shape(), out_dtype);
  const T* px = storage_base<const T>(x);
  dispatch_all(out_dtype, [&]<class R>() {
    R* po = out.data<R>();
    if (x.is_contiguous()) {
      px += x.offset();
      parallel_for(x.numel(), kElementwiseGrain, [&](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) po[i] = static_cast<R>(f(px[i]));
      });
    } else {
      int64_t k = 0;
      for_each_offset(x.shape(), x.strides(), x.offset(), [&](int64_t o) { po[k++] = static_cast<R>(f(px[o])); });
    }
  });
  return out;
}

template <class T, class F>
Tensor zip(std::string_view op, const Tensor& a, const Tensor& b, F f, DType out_dtype = dtype_of<T>()) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(shape, out_dtype);
  using A = T;
  const A* pa = storage_base<const A>(a);
  dispatch_all(b.dtype(), [&]<class B>() {
    const B* pb = storage_base<const B>(b);
    dispatch_all(out_dtype, [&]<class R>() {
      if constexpr (std::is_invocable_v<F, A, B>) {
        R* po = out.data<R>();
        const int64_t n = out.numel();
        if (a.shape() == shape && b.shape() == shape && a.is_contiguous() && b.is_contiguous()) {
          const A* xa = pa + a.offset();
          const B* xb = pb + b.offset();
          parallel_for(n, kElementwiseGrain, [&](int64_t first, int64_t last) {
            for (int64_t i = first; i < last; ++i) po[i] = static_cast<R>(f(xa[i], xb[i]));
          });
          return;
        }
        if (b.numel() == 1 && a.shape() == shape && a.is_contiguous()) {
          const A* xa = pa + a.offset();
          const B vb = pb[b.offset()];
          parallel_for(n, kElementwiseGrain, [&](int64_t first, int64_t last) {
            for (int64_t i = first; i < last; ++i) po[i] = static_cast<R>(f(xa[i], vb));
          });
          return;
        }
        // Walk the output in row-major order, carrying both input offsets.
        int64_t i = 0;
        for_each_offset(shape, [&](int64_t oa, int64_t ob) { po[i++] = static_cast<R>(f(pa[oa], pb[ob])); },
                        Strided{broadcast_strides(a, shape), a.offset()}, Strided{broadcast_strides(b, shape), b.offset()});
      }
    });
  });
  return out;
}

}  // namespace attograd
