#include "examples/common/checkpoint_model.h"

namespace attograd {

std::unique_ptr<GPT> gpt_from_checkpoint(const Checkpoint& c) {
  Generator gen(0);
  auto model = std::make_unique<GPT>(GPTConfig::from_json(c.meta.config), gen);
  model->load_state_dict(c.model);
  model->eval();
  return model;
}

std::unique_ptr<Seq2SeqTransformer> seq2seq_from_checkpoint(const Checkpoint& c) {
  Generator gen(0);
  auto model = std::make_unique<Seq2SeqTransformer>(TransformerConfig::from_json(c.meta.config), gen, nullptr);
  model->load_state_dict(c.model);
  model->eval();
  return model;
}

}  // namespace attograd
