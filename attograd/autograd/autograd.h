// The autograd library in one include: tensors, the engine, every op, custom
// functions, gradcheck, memory options, printing, the thread pool and the
// settings (settings.h: every switch, its default and its variable).
#pragma once
#include <attograd/autograd/error.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/function.h>
#include <attograd/autograd/memory.h>
#include <attograd/autograd/gradcheck.h>
#include <attograd/autograd/print.h>
#include <attograd/autograd/settings.h>
#include <attograd/autograd/tensor.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/ops/attention.h>
#include <attograd/autograd/ops/dropout.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/indexing.h>
#include <attograd/autograd/ops/layer_norm.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/autograd/ops/matmul.h>
#include <attograd/autograd/ops/reduction.h>
#include <attograd/autograd/ops/shape.h>
#include <attograd/autograd/ops/softmax.h>
