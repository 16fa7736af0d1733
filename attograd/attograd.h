// The whole public API in one include (link attograd::attograd, or
// `pkg-config --cflags --libs attograd`): tensors, autograd and the ops,
// custom Functions and gradcheck, graph pictures and the backward trace,
// safetensors I/O, the nn modules, the optimizers and the data pipeline. Each
// header below can also be included on its own.
//
// Where to start: attograd::Tensor (attograd/autograd/tensor.h) and the ops
// (attograd/autograd/ops/, one header per family, shapes in each comment); backward
// and the graph (attograd/autograd/engine.h); NoGradGuard and every other
// switch, with its default and environment variable
// (attograd/autograd/settings.h, included by autograd.h); custom ops with a
// hand-written backward (attograd/autograd/function.h) and gradcheck
// (attograd/autograd/gradcheck.h); attograd::Module and the layers (nn/); the
// optimizers and learning-rate schedules (attograd::optim, optim/); datasets
// and the DataLoader (data/). docs/autograd.md walks through the engine.
#pragma once

#include <attograd/version.h>

#include <attograd/autograd/autograd.h>
#include <attograd/autograd/graph_dot.h>
#include <attograd/autograd/io/safetensors.h>

#include <attograd/nn/attention.h>
#include <attograd/nn/embedding.h>
#include <attograd/nn/generate.h>
#include <attograd/nn/gpt.h>
#include <attograd/nn/init.h>
#include <attograd/nn/layers.h>
#include <attograd/nn/linear.h>
#include <attograd/nn/module.h>
#include <attograd/nn/transformer.h>

#include <attograd/optim/optim.h>

#include <attograd/data/bleu.h>
#include <attograd/data/copy_task.h>
#include <attograd/data/corpus.h>
#include <attograd/data/dataset.h>
#include <attograd/data/gettext_corpus.h>
#include <attograd/data/loader.h>
#include <attograd/data/lm_tokenizer.h>
#include <attograd/data/mo.h>
#include <attograd/data/parallel.h>
#include <attograd/data/sentencepiece.h>
#include <attograd/data/token_windows.h>
#include <attograd/data/tokenizer.h>
#include <attograd/data/tsv.h>
#include <attograd/data/vocab.h>
