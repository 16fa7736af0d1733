#!/usr/bin/python3
"""PyTorch's side of examples/bench in its fastest idiomatic torch 1.13 CPU form.

    /usr/bin/python3 tools/bench_torch_fast.py [--config tiny|base|lm|all] [--threads 1,2] [--warmup 5] [--steps 50]
                                                [--mkldnn on|off] [--foreach on|off] [--precision f32|bf16]
    /usr/bin/python3 tools/bench_torch_fast.py --decode [--lengths 32,128] [--decode-batch 64]
    /usr/bin/python3 tools/bench_torch_fast.py --check   (3 steps of tiny, 1 thread: the loss is finite,
        falls and equals the twin's; step-0 losses of tiny and lm and tiny's greedy tokens equal the twin's)

The models, data, step and output lines are tools/bench_torch.py's (its
helpers are imported: the configs, the batches from the same generator, the
FLOP count, the thread and library settings, the line prefix), so
scripts/bench and tools/bench_table.py read both; each line ends in
"form=stock foreach=on|off precision=f32|bf16" (the table ignores form and foreach, and
keys rows by precision). tools/torch_twin.py stays the parity twin (attograd's parameter
names, batch-first, numerics); this script is what a PyTorch user would
write for the same models:

  - tiny/base: stock nn.Transformer(norm_first=True, activation="relu",
    dropout 0) = attograd's pre-LN Seq2SeqTransformer with a final LayerNorm
    per stack, plus embeddings scaled by sqrt(d_model), fixed sinusoids and a
    Linear generator. lm: nn.TransformerEncoder of stock pre-LN GELU layers
    with a causal mask (the GPT blocks), final LayerNorm, learned positions,
    head tied to the token embedding, no bias.
  - sequence-first layout ([L, B, E], nn.MultiheadAttention's native one):
    the batches are transposed once when they are made, so no layer transposes
    its input, every Linear takes a contiguous 3-D input (torch's addmm path:
    no copy, bias fused), and no output is a strided view.
  - masks: the causal mask is a float -inf/0 tensor built once per length and
    reused (torch 1.13 converts a bool mask to float in every attention call);
    no padding masks (the copy-task and lm batches have no padding).
  - need_weights=False (nn.Transformer's layers pass it); no dropout modules
    outside the stock layers (dropout is 0); the sinusoid table is float32.
  - optimizer: torch.optim.Adam with foreach=True (torch 1.13's default is the
    per-parameter loop; fused Adam is CUDA-only in 1.13), torch's default
    hyperparameters as the twin's bench; zero_grad(set_to_none=True).
  - --precision bf16: the forward and the loss under
    torch.autocast("cpu", dtype=torch.bfloat16), backward outside it, as
    PyTorch's AMP recipe does (docs/design/bf16.md section 7: what torch
    1.13 runs in bf16 then); the optimizer and its weights stay f32.
  - decoding: eval() under torch.inference_mode(), the same no-cache loop.
What neither form avoids in torch 1.13 on the CPU: no public
scaled_dot_product_attention (F._scaled_dot_product_attention is private and
runs the same math), MultiheadAttention's q/k/v .contiguous() copies, and
Debian's build (OpenBLAS, no MKL) runs each batched product of attention as
B*H separate GEMM calls; the fused torch._transformer_encoder_layer_fwd and
_native_multi_head_attention paths are inference-only.
Weights: the twin is built with the same seed and its weights are copied in
(by name), so both forms train the same numbers; the loss is
cross-entropy with ignore_index=PAD, as the twin's bench (no label smoothing).
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch as bt  # noqa: E402  (imports no torch: the environment is set before torch loads)


def build_models(torch, nn, tt):
    """The model classes (defined once torch is imported)."""

    class Seq2Seq(nn.Module):
        def __init__(self, c):
            super().__init__()
            E = c["d_model"]
            self.scale = math.sqrt(E)
            self.src_embed = nn.Embedding(c["vocab"], E, padding_idx=bt.PAD)
            self.tgt_embed = nn.Embedding(c["vocab"], E, padding_idx=bt.PAD)
            self.transformer = nn.Transformer(d_model=E, nhead=c["heads"], num_encoder_layers=c["layers"],
                                              num_decoder_layers=c["layers"], dim_feedforward=c["d_ff"],
                                              dropout=0.0, activation="relu", norm_first=True)
            self.generator = nn.Linear(E, c["vocab"])
            self.register_buffer("pe", tt.sinusoidal_table(256, E).float().unsqueeze(1), persistent=False)
            self.masks = {}

        def causal(self, T):
            m = self.masks.get(T)
            if m is None:
                m = self.masks[T] = nn.Transformer.generate_square_subsequent_mask(T)
            return m

        def embed(self, emb, ids):  # ids [L, B] -> [L, B, E]
            return emb(ids) * self.scale + self.pe[: ids.shape[0]]

        def encode(self, src):
            return self.transformer.encoder(self.embed(self.src_embed, src))

        def decode(self, tgt, memory):
            h = self.transformer.decoder(self.embed(self.tgt_embed, tgt), memory, tgt_mask=self.causal(tgt.shape[0]))
            return self.generator(h)

        def forward(self, src, tgt_in):
            return self.decode(tgt_in, self.encode(src))

    class GPT(nn.Module):
        def __init__(self, c):
            super().__init__()
            E = c["d_model"]
            self.tok_embed = nn.Embedding(c["vocab"], E)
            self.pos = nn.Parameter(torch.zeros(c["len"], 1, E))
            layer = nn.TransformerEncoderLayer(E, c["heads"], c["d_ff"], dropout=0.0, activation="gelu",
                                               norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, c["layers"], norm=nn.LayerNorm(E),
                                                 enable_nested_tensor=False)
            self.lm_head = nn.Linear(E, c["vocab"], bias=False)
            self.lm_head.weight = self.tok_embed.weight
            self.masks = {}

        def forward(self, ids):  # ids [T, B] -> logits [T, B, V]
            T = ids.shape[0]
            mask = self.masks.get(T)
            if mask is None:
                mask = self.masks[T] = nn.Transformer.generate_square_subsequent_mask(T)
            x = self.tok_embed(ids) + self.pos[:T]
            return self.lm_head(self.encoder(x, mask=mask))

    return Seq2Seq, GPT


def _twin():
    import torch_twin
    return torch_twin


def twin_to_stock(name, lm):
    """A torch_twin parameter name -> this script's."""
    if lm:
        if name == "pos.weight":
            return "pos"
        if name.startswith("ln_f."):
            return "encoder.norm." + name[len("ln_f."):]
        for a, b in ((".ln1.", ".norm1."), (".ln2.", ".norm2."), (".attn.", ".self_attn."), (".mlp.", ".")):
            name = name.replace(a, b)
        return name.replace("blocks.", "encoder.layers.", 1)
    for a, b in ((".cross_attn.", ".multihead_attn."), (".ff.", ".")):
        name = name.replace(a, b)
    if name.startswith(("encoder.", "decoder.")):
        return "transformer." + name
    return name


def make_model(torch, tt, classes, c, seed, name):
    """The stock model holding the weights the twin's bench starts from (bench_torch.make_model, same seed)."""
    twin = bt.make_model(torch, tt, c, seed, name)
    lm = name == "lm"
    model = (classes[1] if lm else classes[0])(c).float()
    state = {}
    for k, v in twin.state_dict().items():
        if lm and k == "pos.weight":
            v = v.unsqueeze(1)  # [T, E] -> [T, 1, E]: broadcast over the batch of the [T, B, E] layout
        state[twin_to_stock(k, lm)] = v
    model.load_state_dict(state, strict=True)
    return model, twin


def seq_first(torch, c, name, gen, batch=None):
    """bench_torch's batch (same generator draws), transposed once to [L, B]."""
    if name == "lm":
        w = bt.make_windows(torch, c, gen)
        return w[:, :-1].t().contiguous(), w[:, 1:].t().reshape(-1).contiguous()
    src, tgt_in, tgt_out = bt.make_batch(torch, c, gen, batch)
    return src.t().contiguous(), tgt_in.t().contiguous(), tgt_out.t().reshape(-1).contiguous()


def train_loss(F, model, name, c, batch):
    V = c["vocab"]
    if name == "lm":
        ids, targets = batch
        return F.cross_entropy(model(ids).view(-1, V), targets)
    src, tgt_in, tgt_out = batch
    return F.cross_entropy(model(src, tgt_in).view(-1, V), tgt_out, ignore_index=bt.PAD)


FOREACH = [True]  # --foreach
PRECISION = ["f32"]  # --precision


def make_optimizer(torch, model):
    return torch.optim.Adam(model.parameters(), foreach=FOREACH[0])


def suffix():
    """Ends every line (tools/bench_table.py keys rows by other fields and ignores these)."""
    return f"form=stock foreach={'on' if FOREACH[0] else 'off'} precision={PRECISION[0]}"


def bench_train(torch, F, tt, classes, lib, name, threads, warmup, steps, seed, kernel):
    c = bt.CONFIGS[name]
    bt.set_threads(torch, lib, threads)
    model, _ = make_model(torch, tt, classes, c, seed, name)
    model.train()
    opt = make_optimizer(torch, model)
    gen = torch.Generator().manual_seed(seed)
    batches = [seq_first(torch, c, name, gen) for _ in range(8)]

    def loss_of(b):
        if PRECISION[0] == "f32":
            return train_loss(F, model, name, c, b)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return train_loss(F, model, name, c, b)

    step_ms = bt.train_step_ms(torch, loss_of, opt, batches, warmup, steps)
    bt.train_line(torch, name, threads, kernel, c, steps, step_ms, suffix())


def greedy_no_cache(torch, model, src, length):
    memory = model.encode(src)
    tokens = torch.full((1, src.shape[1]), bt.BOS, dtype=torch.long)
    for _ in range(length):
        logits = model.decode(tokens, memory)  # [T, B, V]
        tokens = torch.cat([tokens, logits[-1].argmax(-1).unsqueeze(0)], dim=0)
    return tokens


def bench_decode(torch, tt, classes, lib, name, threads, batch, lengths, repeats, seed, kernel):
    c = bt.CONFIGS[name]
    bt.set_threads(torch, lib, threads)
    model = make_model(torch, tt, classes, c, seed, name)[0].eval()
    gen = torch.Generator().manual_seed(seed)
    src = seq_first(torch, c, name, gen, batch)[0]
    with torch.inference_mode():
        bt.decode_lines(torch, name, threads, kernel, lambda n: greedy_no_cache(torch, model, src, n), batch,
                        lengths, repeats, suffix())


def check(torch, F, tt, classes, seed):
    """3 training steps of tiny (and a forward of each model): finite losses that fall, the
    stock models' losses at step 0 equal to the twin's on the same weights and batch, and
    tiny's 3 losses equal to those of the twin trained as bench_torch.py trains it, and
    the greedy decode loop giving the twin's tokens."""
    for name in ("tiny", "lm"):
        c = dict(bt.CONFIGS[name])
        if name == "lm":
            c.update(len=32, batch=8)  # a short lm forward: only the parity is checked here
        model, twin = make_model(torch, tt, classes, c, seed, name)
        gen = torch.Generator().manual_seed(seed)
        batch = seq_first(torch, c, name, gen)
        gen = torch.Generator().manual_seed(seed)
        if name == "lm":
            w = bt.make_windows(torch, c, gen)
        else:
            w = bt.make_batch(torch, c, gen)
        with torch.no_grad():
            ours = train_loss(F, model, name, c, batch).item()
            theirs = bt.train_loss(torch, twin, name, c, w).item()
        print(f"check {name}: step-0 loss stock {ours:.6f} twin {theirs:.6f}", flush=True)
        assert math.isfinite(ours) and abs(ours - theirs) <= 1e-5 * max(1.0, abs(theirs)), (name, ours, theirs)
    c = bt.CONFIGS["tiny"]
    model, twin = make_model(torch, tt, classes, c, seed, "tiny")
    src = bt.make_batch(torch, c, torch.Generator().manual_seed(seed), 4)[0]
    with torch.inference_mode():
        ours = greedy_no_cache(torch, model.eval(), src.t().contiguous(), 6).t()
    with torch.no_grad():
        theirs = bt.greedy_no_cache(torch, twin.eval(), src, 6)
    print(f"check tiny: greedy decode of 4 sequences, 6 tokens, same as the twin's: {torch.equal(ours, theirs)}")
    assert torch.equal(ours, theirs)
    model.train()
    opt = make_optimizer(torch, model)
    batch = seq_first(torch, c, "tiny", torch.Generator().manual_seed(seed))
    losses = []
    for _ in range(3):  # the same batch thrice: Adam's first steps must lower its loss
        loss = train_loss(F, model, "tiny", c, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    twin.train()
    twin_opt = torch.optim.Adam(twin.parameters())  # the twin's bench: torch's default (per-parameter) Adam
    twin_batch = bt.make_batch(torch, c, torch.Generator().manual_seed(seed))
    twin_losses = []
    for _ in range(3):
        loss = bt.train_loss(torch, twin, "tiny", c, twin_batch)
        loss.backward()
        twin_opt.step()
        twin_opt.zero_grad(set_to_none=True)
        twin_losses.append(loss.item())
    print("check tiny: losses stock " + " ".join(f"{x:.6f}" for x in losses)
          + ", twin " + " ".join(f"{x:.6f}" for x in twin_losses), flush=True)
    assert all(math.isfinite(x) for x in losses) and losses[0] > losses[1] > losses[2], losses
    assert all(abs(a - b) <= 1e-4 for a, b in zip(losses, twin_losses)), (losses, twin_losses)
    print("check: ok", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bt.add_bench_flags(ap)
    ap.add_argument("--foreach", choices=["on", "off"], default="on",
                    help="Adam's foreach implementation (torch 1.13's default on the CPU: off)")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                    help="bf16: the forward under torch.autocast('cpu', dtype=torch.bfloat16) (training rows)")
    ap.add_argument("--check", action="store_true",
                    help="3 steps of tiny: the loss is finite, falls, and equals the twin's")
    args = ap.parse_args()
    bt.check_bench_flags(ap, args)
    if args.decode and args.precision != "f32":
        ap.error("--precision bf16 times training; decoding runs in float32, so --decode takes no --precision")
    FOREACH[0] = args.foreach == "on"
    PRECISION[0] = args.precision

    lib = bt.openblas()
    threads = [1] if args.check else args.threads
    bt.ensure_environment(lib, max(threads))  # before torch loads (may re-execute this script once)
    import torch
    import torch.nn.functional as F
    from torch import nn
    tt = _twin()
    classes = build_models(torch, nn, tt)
    torch.set_num_interop_threads(1)
    torch.backends.mkldnn.enabled = args.mkldnn == "on"
    kernel = lib.openblas_get_corename().decode() if lib is not None else "unknown"

    if args.check:
        bt.set_threads(torch, lib, 1)
        check(torch, F, tt, classes, args.seed)
        return 0
    if args.decode:
        name = "tiny" if args.config == "tiny" else "base"
        for t in args.threads:
            bench_decode(torch, tt, classes, lib, name, t, args.decode_batch, args.lengths, args.repeats, args.seed,
                         kernel)
        return 0
    names = ["tiny", "base", "lm"] if args.config == "all" else [args.config]
    for name in names:
        for t in args.threads:
            bench_train(torch, F, tt, classes, lib, name, t, args.warmup, args.steps, args.seed, kernel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
