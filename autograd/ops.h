// Everything a user of the autograd library needs, in one include.
#pragma once
#include "autograd/error.h"
#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "autograd/tensor.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/reduction.h"
#include "autograd/ops/shape.h"
