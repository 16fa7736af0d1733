"""The "nn" fixture group of tools/make_torch_fixtures.py: PyTorch reference
values for LayerNorm, MultiheadAttention, grouped-query attention (G < H), a
whole pre-LN Seq2SeqTransformer and a decoder-only GPT.

Each file holds, in float64, the inputs, the weights under attograd's
parameter names, an output gradient "g" (the loss is sum(out * g)), the output
"out" and every gradient: "grad.<input>" and "grad.<parameter>". The attograd
tests load a file, run the same module and compare to 1e-6 relative.
"""
import torch
import torch.nn.functional as F

import torch_twin as tt

F64 = torch.float64


def _randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=F64)


def _grads(prefix, named):
    return {f"grad.{prefix}{n}": t.grad.detach().clone() for n, t in named if t.grad is not None}


def layer_norm_fixture(write):
    gen = torch.Generator().manual_seed(11)
    x = _randn(gen, 2, 3, 5).requires_grad_()
    ln = torch.nn.LayerNorm(5, eps=1e-5).double()
    with torch.no_grad():
        ln.weight.copy_(_randn(gen, 5))
        ln.bias.copy_(_randn(gen, 5))
    g = _randn(gen, 2, 3, 5)
    out = ln(x)
    (out * g).sum().backward()
    tensors = {"x": x.detach(), "weight": ln.weight.detach(), "bias": ln.bias.detach(), "g": g,
               "out": out.detach(), "grad.x": x.grad}
    tensors.update(_grads("", ln.named_parameters()))
    write("nn", "layer_norm.safetensors", tensors, {"normalized_shape": [5], "eps": 1e-5})


def _attention_io(gen, B, T, S, E, self_attn, padded, attend):
    """Random query (and key, value for cross-attention) [B, ·, E], batch row 1's
    last `padded` keys padded, out, weights = attend(query, key, value, mask),
    then backward of sum(out * g): the fixture's inputs, outputs and input gradients."""
    query = _randn(gen, B, T, E).requires_grad_()
    key = query if self_attn else _randn(gen, B, S, E).requires_grad_()
    value = query if self_attn else _randn(gen, B, S, E).requires_grad_()
    kpm_t = None
    if padded:  # never a whole row
        kpm_t = torch.zeros(B, S, dtype=torch.bool)
        kpm_t[1, S - padded:] = True
    out, weights = attend(query, key, value, kpm_t)
    g = _randn(gen, B, T, E)
    (out * g).sum().backward()
    tensors = {"query": query.detach(), "g": g, "out": out.detach(), "weights": weights.detach(),
               "grad.query": query.grad}
    if not self_attn:
        tensors.update({"key": key.detach(), "value": value.detach(), "grad.key": key.grad, "grad.value": value.grad})
    if kpm_t is not None:
        tensors["key_padding_mask"] = kpm_t
    return tensors


# name -> query length T, key length S, self- or cross-attention, key padding, causal mask
MHA_CASES = {
    "mha_nomask": dict(T=4, S=4, self_attn=True, kpm=False, causal=False),
    "mha_causal": dict(T=4, S=4, self_attn=True, kpm=False, causal=True),
    "mha_key_padding": dict(T=4, S=4, self_attn=True, kpm=True, causal=False),
    "mha_cross": dict(T=3, S=5, self_attn=False, kpm=True, causal=False),
}


def mha_fixture(write, name, seed, T, S, self_attn, kpm, causal):
    E, H, B = 8, 2, 2
    gen = torch.Generator().manual_seed(seed)
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True).double()
    # Weights under attograd's names, then packed into PyTorch's in_proj.
    w = {f"{p}.{k}": _randn(gen, E, E) * 0.3 if k == "weight" else _randn(gen, E) * 0.1
         for p in ("q_proj", "k_proj", "v_proj", "out_proj") for k in ("weight", "bias")}
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([w["q_proj.weight"], w["k_proj.weight"], w["v_proj.weight"]]))
        mha.in_proj_bias.copy_(torch.cat([w["q_proj.bias"], w["k_proj.bias"], w["v_proj.bias"]]))
        mha.out_proj.weight.copy_(w["out_proj.weight"])
        mha.out_proj.bias.copy_(w["out_proj.bias"])
    mask = torch.triu(torch.ones(T, S, dtype=torch.bool), diagonal=1) if causal else None
    tensors = _attention_io(gen, B, T, S, E, self_attn, 2 if kpm else 0, lambda q, k, v, kpm_t: mha(
        q, k, v, key_padding_mask=kpm_t, attn_mask=mask, need_weights=True, average_attn_weights=False))
    tensors.update(w)
    # Parameter gradients under attograd's names (split the packed in_proj).
    for i, p in enumerate(("q_proj", "k_proj", "v_proj")):
        tensors[f"grad.{p}.weight"] = mha.in_proj_weight.grad[i * E:(i + 1) * E].clone()
        tensors[f"grad.{p}.bias"] = mha.in_proj_bias.grad[i * E:(i + 1) * E].clone()
    tensors["grad.out_proj.weight"] = mha.out_proj.weight.grad
    tensors["grad.out_proj.bias"] = mha.out_proj.bias.grad
    write("nn", f"{name}.safetensors", tensors,
          {"embed_dim": E, "num_heads": H, "self_attention": self_attn, "is_causal": causal})


# Grouped-query attention (K/V heads G < H), against torch_twin's GroupedQueryAttention,
# which repeats each K/V head for its group with repeat_interleave.
GQA_CASES = {
    "gqa_causal": dict(H=4, G=2, T=4, S=4, self_attn=True, kpm=True, causal=True),
    "mqa_cross": dict(H=4, G=1, T=3, S=5, self_attn=False, kpm=True, causal=False),
}


def gqa_fixture(write, name, seed, H, G, T, S, self_attn, kpm, causal):
    E, B = 8, 2
    gen = torch.Generator().manual_seed(seed)
    mha = tt.GroupedQueryAttention(E, H, G).double()
    with torch.no_grad():
        for _, p in mha.named_parameters():
            p.copy_(_randn(gen, *p.shape) * (0.3 if p.dim() > 1 else 0.1))
    tensors = _attention_io(gen, B, T, S, E, self_attn, 1 if kpm else 0, lambda q, k, v, kpm_t: mha(
        q, k, v, key_padding_mask=kpm_t, is_causal=causal))
    tensors.update({n: p.detach() for n, p in mha.named_parameters()})
    tensors.update(_grads("", mha.named_parameters()))
    write("nn", f"{name}.safetensors", tensors,
          {"embed_dim": E, "num_heads": H, "num_kv_heads": G, "self_attention": self_attn, "is_causal": causal})


SEQ2SEQ_CONFIG = dict(src_vocab=11, tgt_vocab=13, d_model=16, heads=2, d_ff=32, enc_layers=2, dec_layers=2,
                      dropout=0.0, max_len=32, pre_ln=True, tie_embeddings=False, activation="relu", pad_id=0,
                      layer_norm_eps=1e-5)


def seq2seq_fixture(write):
    torch.manual_seed(5)
    c = tt.Config(**SEQ2SEQ_CONFIG)
    model = tt.Seq2SeqTransformer(c).double()
    model.train()  # dropout is 0, so train and eval agree
    # Random weights (PyTorch's init zeroes biases; random ones test more).
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(_randn(gen, *p.shape) * (0.3 if p.dim() > 1 else 0.1))
        model.src_embed.weight[c.pad_id].zero_()
        model.tgt_embed.weight[c.pad_id].zero_()
    pad = c.pad_id
    src = torch.tensor([[4, 5, 6, 7, 2], [8, 9, 2, pad, pad]])           # [B, S], row 1 padded
    tgt_in = torch.tensor([[1, 4, 5, 6], [1, 8, 9, pad]])                 # [B, T]
    tgt_out = torch.tensor([[4, 5, 6, 2], [8, 9, 2, pad]])
    src_kpm = src == pad
    logits = model(src, tgt_in, src_kpm)
    loss = F.cross_entropy(logits.reshape(-1, c.tgt_vocab), tgt_out.reshape(-1), ignore_index=pad)
    loss.backward()
    state = tt.to_attograd_state(model)
    tensors = {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "logits": logits.detach(), "loss": loss.detach()}
    tensors.update({k: v.detach().clone() for k, v in state.items()})
    # Gradients per attograd name: split the packed in_proj gradients like the weights.
    grads = tt.to_attograd_state(model, grads=True)
    tensors.update({f"grad.{k}": v for k, v in grads.items()})
    write("nn", "seq2seq.safetensors", tensors, {"config": SEQ2SEQ_CONFIG})


# name -> GPT config (tools/torch_twin.GPTConfig, attograd's GPTConfig JSON)
GPT_CASES = {
    "gpt_learned_tied": dict(vocab=11, context=8, d_model=16, heads=2, d_ff=24, layers=2, dropout=0.0,
                             positions="learned", tie_embeddings=True, init="pytorch", layer_norm_eps=1e-5),
    "gpt_sinusoidal_untied": dict(vocab=11, context=8, d_model=16, heads=4, d_ff=24, layers=2, dropout=0.0,
                                  positions="sinusoidal", tie_embeddings=False, init="gpt2", layer_norm_eps=1e-5),
}


def gpt_fixture(write, name, seed, config):
    """ids [B, T] -> logits [B, T, V]; loss = F.cross_entropy over the next tokens."""
    torch.manual_seed(seed)
    c = tt.GPTConfig(**config)
    model = tt.GPT(c).double()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(_randn(gen, *p.shape) * (0.3 if p.dim() > 1 else 0.1))
    seq = torch.randint(0, c.vocab, (2, 7), generator=gen)
    ids, targets = seq[:, :-1], seq[:, 1:]
    logits = model(ids)
    loss = F.cross_entropy(logits.reshape(-1, c.vocab), targets.reshape(-1))
    loss.backward()
    tensors = {"ids": ids.contiguous(), "targets": targets.contiguous(), "logits": logits.detach(),
               "loss": loss.detach()}
    tensors.update({k: v.detach().clone() for k, v in tt.to_attograd_state(model).items()})
    tensors.update({f"grad.{k}": v.clone() for k, v in tt.to_attograd_state(model, grads=True).items()})
    if c.tie_embeddings:
        tensors["lm_head.weight"] = tensors["tok_embed.weight"]
    write("nn", f"{name}.safetensors", tensors, {"config": config})


def nn_fixtures(write):
    layer_norm_fixture(write)
    for seed, (name, case) in enumerate(MHA_CASES.items()):
        mha_fixture(write, name, 100 + seed, **case)
    for seed, (name, case) in enumerate(GQA_CASES.items()):
        gqa_fixture(write, name, 200 + seed, **case)
    seq2seq_fixture(write)
    for seed, (name, config) in enumerate(GPT_CASES.items()):
        gpt_fixture(write, name, 200 + seed, config)
