// Printing a Tensor with fmt, as PyTorch prints it:
//   tensor([[1.0000, 2.0000]], shape=[1, 2], dtype=f32, grad_fn=<mul>)
// It shows the grad_fn, so it sits above the engine; attograd/autograd/autograd.h includes it.
#pragma once
#include <fmt/format.h>

#include <attograd/autograd/engine.h>

template <>
struct fmt::formatter<attograd::Tensor> : fmt::formatter<std::string_view> {
  fmt::format_context::iterator format(const attograd::Tensor& t, fmt::format_context& ctx) const;
};
