// evaluate() (examples/common/trainer.h) scores a sentence the same whatever
// it is batched with: the padding that batching adds is masked for every
// attention, including a decoder self-attention without the causal mask
// (TransformerConfig::causal_decoder = false), which would otherwise read it;
// and it scores exactly the first max_examples sentences, even when the last
// batch reaches past them.
#include <memory>

#include <gtest/gtest.h>

#include "examples/common/trainer.h"
#include "test_util.h"

namespace attograd::app {
namespace {

// Two sentences of different target lengths: batched together, the shorter
// target is padded to the longer.
VectorDataset two_sentences() {
  return VectorDataset({Example{{3, 4, 5}, {6, 7}}, Example{{5, 3}, {8, 6, 7, 5, 4}}});
}

double loss_batched(Seq2SeqTransformer& model, int64_t batch_size) {
  EvalOptions o;
  o.batch_size = batch_size;
  o.decode = false;
  return evaluate(model, two_sentences(), o).loss;
}

std::unique_ptr<Seq2SeqTransformer> tiny_model(bool causal) {
  TransformerConfig c;
  c.src_vocab = 7;
  c.tgt_vocab = 9;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 12;
  c.enc_layers = 1;
  c.dec_layers = 1;
  c.dropout = 0.0;
  c.max_len = 16;
  c.causal_decoder = causal;
  Generator gen(5);
  return std::make_unique<Seq2SeqTransformer>(c, gen, nullptr);
}

TEST(Seq2SeqEvaluate, TheLossOfASentenceDoesNotDependOnThePaddingOfItsBatch) {
  for (const bool causal : {true, false}) {
    const auto model = tiny_model(causal);
    const double alone = loss_batched(*model, 1), together = loss_batched(*model, 2);
    EXPECT_GT(alone, 0.1) << "an untrained model has a real loss";
    EXPECT_NEAR(together, alone, 1e-6 * alone) << (causal ? "causal" : "no causal mask");
  }
}

TEST(Seq2SeqEvaluate, ALastBatchPastMaxExamplesCountsOnlyTheFirstSentences) {
  const auto model = tiny_model(true);
  EvalOptions o;
  o.decode = true;
  o.batch_size = 2;
  o.max_examples = 1;   // the batch holds both sentences; only the first may count
  const EvalResult first = evaluate(*model, two_sentences(), o);
  const EvalResult alone = evaluate(*model, VectorDataset({two_sentences().get(0)}), o);
  EXPECT_EQ(first.tokens, alone.tokens);
  EXPECT_NEAR(first.loss, alone.loss, 1e-6 * alone.loss);
  EXPECT_EQ(first.outputs.size(), 1u);
  EXPECT_EQ(first.outputs, alone.outputs);
}

}  // namespace
}  // namespace attograd::app
