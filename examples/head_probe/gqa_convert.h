// head_probe lm-convert-gqa: a trained GPT (examples/lm) with G0 K/V heads
// (G0 = H for a multi-head model) converted to grouped-query attention with
// G K/V heads, G dividing G0, for uptraining with `lm train --init-from OUT
// --kv-heads G` (Ainslie et al. 2023).
//
// Shape legend: H query heads, G0 the model's K/V heads, G the new K/V heads,
// R = G0 / G heads pooled into one, D = E / H head width, E = d_model.
//   blocks.i.attn.k_proj.weight [G0·D, E] -> [G·D, E]   (bias [G0·D] -> [G·D]; v_proj alike)
// Pooling of each group's R consecutive heads (MultiHeadAttention's grouping):
//   mean:  their mean (weights and biases), as Ainslie et al. convert;
//   first: the group's first head alone, a control for what averaging adds.
// Every other tensor (q_proj, out_proj, the MLP, embeddings) is unchanged.
#pragma once
#include <cstdint>
#include <string>

#include <attograd/autograd/io/safetensors.h>
#include <attograd/nn/gpt.h>

namespace attograd::app::probe {

// How the R K/V heads of a group become one (file comment).
enum class KvPool { mean, first };

// "mean" or "first"; anything else is a ValueError naming --pool.
KvPool parse_kv_pool(const std::string& name);

// What to_grouped_query_gpt gives: the converted model's config and weights.
struct GroupedQueryGPT {
  GPTConfig config;  // kv_heads = G
  TensorMap state;   // the K/V projections pooled to G heads, the rest as given
};

// state (a GPT of config c, as state_dict() names it) with every block's
// k_proj and v_proj pooled from c.kv_head_count() to kv_heads heads.
// ValueError when kv_heads does not divide the model's K/V heads or a K/V
// projection weight is missing from state.
GroupedQueryGPT to_grouped_query_gpt(const GPTConfig& c, const TensorMap& state, int64_t kv_heads, KvPool pool);

// Converts the lm checkpoint at `checkpoint` (a directory or a model file) and
// writes `out`, a *.model.safetensors file with the checkpoint's metadata
// (task, step) and the new config, program "head_probe". lm eval reads the
// tokenizer beside the model file, so the checkpoint's tokenizer files are
// copied into out's directory when it has none (an IOError when it holds a
// different one). Returns a one-line summary.
std::string convert_lm_to_grouped_query(const std::string& checkpoint, int64_t kv_heads, KvPool pool,
                                        const std::string& out);

// The subcommand (argv[0] naming it): --checkpoint, --kv-heads, --pool,
// --to; convert_lm_to_grouped_query, its summary on stdout.
int lm_convert_gqa_main(int argc, char** argv);

}  // namespace attograd::app::probe
