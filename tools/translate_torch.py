#!/usr/bin/python3
"""translate's text task trained in PyTorch from the stock torch.nn.Transformer,
the reference that attograd's test BLEU and training tokens/s are held to
(issue 33, "Checked against PyTorch").

    /usr/bin/python3 tools/translate_torch.py --data DIR --spm-src A.model --spm-tgt B.model \
        --hyp-out test.hyp [--steps 1500 --max-tokens 4096 --beam 4 --threads 2 ...]

It writes the detokenized test hypotheses; `translate score` scores them and
attograd's own with one BLEU/chrF implementation. The defaults are `translate
train`'s for text corpora. What mirrors what:
  - corpus: DIR/{train,valid,test}.tsv as `translate prepare` writes them, `source<TAB>target`,
    an optional '#' header (attograd/data/tsv.h); training pairs too long for --max-len left out.
  - ids: the Vocab translate builds from a SentencePiece model (attograd/data/sentencepiece.h):
    <pad> 0, <bos> 1, <eos> 2, <unk> 3, then piece i keeps its SentencePiece id i
    (SentencePiece's <unk> 0 becomes 3; its <s>, </s> never come out of encode).
  - collate (attograd/data/loader.h): source = src + <eos>, tgt_in = <bos> + tgt,
    tgt_out = tgt + <eos>, right-padded with 0; key padding masks; causal mask.
  - model (attograd/nn/transformer.h): nn.Transformer(norm_first=True, batch_first=True,
    ReLU) has attograd's pre-LN layers and final LayerNorm per stack; as
    Seq2SeqTransformer::encode/decode, embeddings are scaled by sqrt(d_model),
    fixed sinusoids are added (attograd/nn/embedding.h) and dropout follows; a Linear
    generator, untied. Weights keep PyTorch's own init (nn.Transformer's
    xavier_uniform_, Linear's kaiming-uniform) but for the embeddings: N(0, 1/d_model)
    as attograd's (attograd/nn/transformer.h says why), not Embedding's N(0, 1).
  - training (examples/common/trainer.h, train_choices.cpp, attograd/optim/schedule.h):
    Adam/AdamW with beta2 0.98, eps 1e-9, --weight-decay on every parameter;
    the schedule sets step t's lr (t from 1) before the update; grad-norm clipping;
    cross-entropy over non-pad target tokens with label smoothing.
  - batches (attograd/data/loader.h, fairseq's --max-tokens): examples sorted by
    max(|src|, |tgt|) + 1 (ties by index), cut so rows x longest row <= --max-tokens,
    the batches shuffled each epoch (Python's RNG, not attograd's: other batches).
  - decoding (attograd/nn/generate.cpp): greedy argmax, and beam search keeping the best
    2K candidates per step, finished hypotheses ranked by
    log_prob / ((5 + len) / 6)^alpha with len counting <eos>, seeded with greedy's
    hypothesis. Outputs stop at <eos>; <bos>/<pad> are dropped and <unk> decodes
    as SentencePiece's " ⁇ " (Vocab::decode_sequence, SentencePiecePieces::join).
    The test is decoded as translate's evaluate() does: batches of 128 in file
    order, at most the batch's longest reference + 8 tokens (--max-decode-len
    overrides). nn.Transformer has no KV cache: each step re-runs the decoder on the prefix.
"""
import argparse
import json
import math
import os
import random
import sys
import time
import warnings

import sentencepiece as spm
import torch
import torch.nn.functional as F
from torch import nn

PAD, BOS, EOS, UNK = 0, 1, 2, 3


# ---- data -----------------------------------------------------------------------------------

class Subwords:
    """A SentencePiece model seen through attograd's vocabulary ids."""

    def __init__(self, path):
        self.sp = spm.SentencePieceProcessor(model_file=path)
        self.size = self.sp.get_piece_size()

    def encode(self, text):
        return [UNK if i == 0 else i for i in self.sp.encode(text)]

    def decode(self, ids):
        """Up to <eos>, without <bos>/<pad>; <unk> as SentencePiece's."""
        ids = ids[: ids.index(EOS)] if EOS in ids else ids
        return self.sp.decode([0 if i == UNK else i for i in ids if i not in (BOS, PAD)])


def read_split(path):
    """(source, target) pairs of a TSV file, as attograd/data/tsv.h reads two columns."""
    pairs = []
    with open(path, encoding="utf-8", newline="\n") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n").removesuffix("\r")
            if n == 1 and line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not all(fields):
                sys.exit(f"{path}:{n}: expected two non-empty tab-separated fields, got {len(fields)}")
            pairs.append((fields[0], fields[1]))
    if not pairs:
        sys.exit(f"{path}: no sentence pairs")
    return pairs


def encode_split(pairs, src_sp, tgt_sp, max_len, name):
    """Id pairs; as translate train does, training pairs longer than --max-len
    allows (+ <bos>/<eos>) are left out, and a long valid or test pair is an error."""
    examples = [(src_sp.encode(s), tgt_sp.encode(t)) for s, t in pairs]
    fits = [max(len(s), len(t)) + 2 <= max_len for s, t in examples]
    if name != "train" and not all(fits):
        n = fits.index(False)
        sys.exit(f"{name} pair {n + 1} has {max(map(len, examples[n]))} tokens, which needs --max-len >= "
                 f"{max(map(len, examples[n])) + 2} (sentence + BOS/EOS)")
    if not all(fits):
        print(f"left out {fits.count(False)} of {len(examples)} training pairs longer than --max-len {max_len} allows")
    return [e for e, ok in zip(examples, fits) if ok]


def row_length(ex):
    return max(len(ex[0]), len(ex[1])) + 1  # + <eos> (or <bos>)


def token_batches(examples, max_tokens):
    """Index lists sorted by length, each within rows x longest row <= max_tokens."""
    order = sorted(range(len(examples)), key=lambda i: (row_length(examples[i]), i))
    batches, cur, longest = [], [], 0
    for i in order:
        n = row_length(examples[i])
        if n > max_tokens:
            sys.exit(f"a pair of {n} tokens exceeds --max-tokens {max_tokens}")
        if cur and (len(cur) + 1) * max(longest, n) > max_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    batches.append(cur)
    return batches


def collate(rows):
    """src [B, S], tgt_in [B, T], tgt_out [B, T] (attograd/data/loader.h's collate)."""
    S = max(len(s) for s, _ in rows) + 1
    T = max(len(t) for _, t in rows) + 1
    src = torch.full((len(rows), S), PAD, dtype=torch.long)
    tgt_in = torch.full((len(rows), T), PAD, dtype=torch.long)
    tgt_out = torch.full((len(rows), T), PAD, dtype=torch.long)
    for r, (s, t) in enumerate(rows):
        src[r, : len(s) + 1] = torch.tensor(s + [EOS])
        tgt_in[r, : len(t) + 1] = torch.tensor([BOS] + t)
        tgt_out[r, : len(t) + 1] = torch.tensor(t + [EOS])
    return src, tgt_in, tgt_out


# ---- model ----------------------------------------------------------------------------------

def sinusoids(max_len, dim):
    """pe[p, 2i] = sin(p / 10000^(2i/E)), pe[p, 2i+1] = cos(same) (PositionalEncoding)."""
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    freq = torch.pow(10000.0, -torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    pe = torch.zeros(max_len, dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return pe.float()


class Translator(nn.Module):
    def __init__(self, a, src_vocab, tgt_vocab):
        super().__init__()
        self.scale = math.sqrt(a.d_model)
        self.src_embed = nn.Embedding(src_vocab, a.d_model, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(tgt_vocab, a.d_model, padding_idx=PAD)
        with torch.no_grad():  # N(0, 1/d_model), as attograd's Seq2SeqTransformer (and fairseq) start them
            for table in (self.src_embed, self.tgt_embed):
                table.weight.mul_(self.scale ** -1)
        self.register_buffer("pe", sinusoids(a.max_len, a.d_model), persistent=False)
        self.embed_dropout = nn.Dropout(a.dropout)
        self.transformer = nn.Transformer(
            d_model=a.d_model, nhead=a.heads, num_encoder_layers=a.enc_layers, num_decoder_layers=a.dec_layers,
            dim_feedforward=a.d_ff, dropout=a.dropout, activation="relu", batch_first=True, norm_first=True)
        self.generator = nn.Linear(a.d_model, tgt_vocab)

    def embed(self, table, ids):
        return self.embed_dropout(table(ids) * self.scale + self.pe[: ids.size(1)])

    def encode(self, src, src_kpm):
        return self.transformer.encoder(self.embed(self.src_embed, src), src_key_padding_mask=src_kpm)

    def decode(self, tgt, memory, src_kpm, tgt_kpm=None):
        T = tgt.size(1)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # true: not allowed
        h = self.transformer.decoder(self.embed(self.tgt_embed, tgt), memory, tgt_mask=causal,
                                     tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=src_kpm)
        return self.generator(h)

    def forward(self, src, tgt_in):
        src_kpm = src == PAD
        return self.decode(tgt_in, self.encode(src, src_kpm), src_kpm, tgt_in == PAD)


# ---- optimizer and schedules (train_choices.cpp, attograd/optim/schedule.cpp) -------------------------

def make_optimizer(a, params):
    if a.optimizer == "sgd":
        return torch.optim.SGD(params, lr=a.lr, momentum=0.9, weight_decay=a.weight_decay)
    cls = torch.optim.Adam if a.optimizer == "adam" else torch.optim.AdamW
    return cls(params, lr=a.lr, betas=(0.9, 0.98), eps=1e-9, weight_decay=a.weight_decay)


def lr_at(t, a):
    """The lr of step t (from 1)."""
    w = max(a.warmup, 1)  # warmup, noam and inverse-sqrt count --warmup 0 as 1
    if a.schedule == "constant":
        return a.lr
    if a.schedule == "warmup":
        return a.lr * min(1.0, t / w)
    if a.schedule == "cosine":
        if t <= a.warmup:
            return a.lr * t / a.warmup
        if t >= a.steps:
            return a.min_lr
        progress = (t - a.warmup) / (a.steps - a.warmup)
        return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))
    if a.schedule == "noam":
        return a.lr * a.d_model ** -0.5 * min(t ** -0.5, t * w ** -1.5)
    if a.schedule == "inverse-sqrt":
        return a.lr * t / w if t <= w else a.lr * math.sqrt(w / t)
    return a.lr * 0.1 ** ((t - 1) // max(a.steps // 3, 1))  # step


# ---- evaluation and decoding (attograd/nn/generate.cpp) -------------------------------------------------

@torch.no_grad()
def valid_loss(model, examples, max_tokens):
    """Mean cross-entropy per non-pad target token, teacher-forced, no smoothing."""
    model.eval()
    total, tokens = 0.0, 0
    for b in token_batches(examples, max_tokens):
        src, tgt_in, tgt_out = collate([examples[i] for i in b])
        logits = model(src, tgt_in)
        total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1),
                                 ignore_index=PAD, reduction="sum").item()
        tokens += int((tgt_out != PAD).sum())
    model.train()
    return total / tokens


@torch.no_grad()
def greedy(model, src, max_len):
    """[(tokens, log_prob)] per row of src; finished rows leave the batch."""
    kpm = src == PAD
    memory = model.encode(src, kpm)
    B = src.size(0)
    ys = torch.full((B, 1), BOS, dtype=torch.long)
    live = torch.arange(B)
    out = [[[], 0.0] for _ in range(B)]
    for _ in range(max_len):
        logp = model.decode(ys, memory, kpm)[:, -1].double().log_softmax(-1)
        best, tok = logp.max(-1)
        keep = []
        for r, (row, t, lp) in enumerate(zip(live.tolist(), tok.tolist(), best.tolist())):
            out[row][1] += lp
            if t != EOS:
                out[row][0].append(t)
                keep.append(r)
        if not keep:
            break
        keep = torch.tensor(keep)
        ys = torch.cat([ys, tok.unsqueeze(1)], 1)[keep]
        memory, kpm, live = memory[keep], kpm[keep], live[keep]
    return [tuple(o) for o in out]


def penalty(n, alpha):
    return ((5.0 + n) / 6.0) ** alpha


@torch.no_grad()
def beam_search(model, src, seeds, K, alpha, max_len):
    """beam_search of attograd/nn/generate.cpp for each row of src [B, S], seeded with
    greedy's (tokens, log_prob) per row. The rows' beams share one decoder call
    per step. A row stops early only once no live beam can beat its best
    finished score (a bound: the result is that of running to max_len)."""
    kpm = src == PAD
    memory = model.encode(src, kpm)
    finished = [[(lp / penalty(len(t) + 1, alpha), t)] for t, lp in seeds]
    live = [[([BOS], 0.0)] for _ in seeds]
    worst_penalty = penalty(max_len, alpha)
    for _ in range(max_len):
        owner = torch.tensor([b for b, beams in enumerate(live) for _ in beams], dtype=torch.long)
        if len(owner) == 0:
            break
        ys = torch.tensor([p for beams in live for p, _ in beams])
        logp = model.decode(ys, memory[owner], kpm[owner])[:, -1].double().log_softmax(-1)
        total = torch.tensor([lp for beams in live for _, lp in beams], dtype=torch.float64).unsqueeze(1) + logp
        V, first = total.size(1), 0
        for b, beams in enumerate(live):
            n = len(beams)
            if n == 0:
                continue
            values, flat = total[first: first + n].reshape(-1).topk(min(2 * K, n * V))
            first += n
            nxt = []
            for v, f in zip(values.tolist(), flat.tolist()):
                if len(nxt) == K:
                    break
                prefix, tok = beams[f // V][0], f % V
                if tok == EOS:
                    finished[b].append((v / penalty(len(prefix), alpha), prefix[1:]))  # len = tokens + <eos>
                else:
                    nxt.append((prefix + [tok], v))
            best = max(sc for sc, _ in finished[b])
            if alpha == 0:  # extensions only lower log_prob
                nxt = [(p, lp) for p, lp in nxt if lp > best]
            live[b] = [] if all(lp / worst_penalty < best for _, lp in nxt) else nxt
    for b, beams in enumerate(live):  # reached max_len without <eos>
        finished[b] += [(lp / penalty(len(p) - 1, alpha), p[1:]) for p, lp in beams]
    return [max(f, key=lambda h: h[0])[1] for f in finished]


def decode_test(model, examples, a):
    """Greedy outputs and (with --beam > 1) beam outputs, in file order. As
    translate's test evaluate(), batches of --decode-batch pairs in file order,
    each bounded by --max-decode-len or else by its longest reference + 8."""
    model.eval()
    greedy_out, beam_out = [], []
    for k in range(0, len(examples), a.decode_batch):
        batch = examples[k: k + a.decode_batch]
        max_len = a.max_decode_len or min(max(len(t) for _, t in batch) + 8, a.max_len - 1)
        src, _, _ = collate([(s, []) for s, _ in batch])
        hyps = greedy(model, src, max_len)
        greedy_out += [h[0] for h in hyps]
        if a.beam > 1:
            beam_out += beam_search(model, src, hyps, a.beam, a.length_penalty, max_len)
    return greedy_out, beam_out if a.beam > 1 else None


def write_lines(path, sp, outputs):
    with open(path, "w", encoding="utf-8") as f:
        for ids in outputs:
            f.write(sp.decode(ids).replace("\r", " ").replace("\n", " ") + "\n")  # one hypothesis per line


# ---- the run ----------------------------------------------------------------------------------

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="directory with train.tsv, valid.tsv, test.tsv")
    p.add_argument("--spm-src", required=True, help="SentencePiece model of the sources")
    p.add_argument("--spm-tgt", required=True, help="of the targets (the same file for a joint vocabulary)")
    p.add_argument("--hyp-out", required=True, help="test hypotheses, one per line (--beam's, or greedy's)")
    p.add_argument("--greedy-out", default="", help="also write greedy's test hypotheses here")
    # translate's text_model() and text_training() (examples/translate/main.cpp), the rest TrainOptions'
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=512)
    p.add_argument("--enc-layers", type=int, default=2)
    p.add_argument("--dec-layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--max-len", type=int, default=128, help="positional table size; a pair needs max tokens + 2")
    p.add_argument("--optimizer", choices=["adamw", "adam", "sgd"], default="adamw")
    p.add_argument("--lr", type=float, default=2e-3, help="peak lr (noam: its factor)")
    p.add_argument("--min-lr", type=float, default=1e-5, help="cosine floor")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--schedule", choices=["constant", "warmup", "cosine", "noam", "inverse-sqrt", "step"],
                   default="inverse-sqrt")
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--max-tokens", type=int, default=4096, help="rows x longest row per batch")
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0, help="max gradient norm (0: off)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--eval-every", type=int, default=500, help="valid loss every N steps (0: only at the end)")
    p.add_argument("--eval-size", type=int, default=500, help="the first N valid pairs")
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--beam", type=int, default=4, help="beam size (1: greedy)")
    p.add_argument("--length-penalty", type=float, default=0.6, help="GNMT alpha")
    p.add_argument("--max-decode-len", type=int, default=0,
                   help="most output tokens (0: the batch's longest reference + 8, below --max-len, as translate)")
    p.add_argument("--decode-batch", type=int, default=128, help="test sentences per decode batch (EvalOptions')")
    p.add_argument("--mkldnn", choices=["on", "off"], default="on", help="PyTorch's oneDNN kernels (bench: the faster)")
    a = p.parse_args()
    if a.schedule == "cosine" and not (a.warmup < a.steps and a.min_lr <= a.lr):
        p.error("cosine needs --warmup < --steps and --min-lr <= --lr")
    if a.d_model % a.heads or a.d_model % 2:
        p.error("--heads must divide --d-model, which must be even (sinusoids)")
    if not 0 <= a.max_decode_len < a.max_len:
        p.error("--max-decode-len must be in [0, --max-len)")
    return a


def train_loop(model, opt, params, train, valid, batches, a):
    """--steps updates; returns (steps, seconds in training steps, target tokens, last valid loss)."""
    rng = random.Random(a.seed)
    step, train_seconds, train_tokens, loss_sum, loss_n, vloss = 0, 0.0, 0, 0.0, 0, float("nan")
    model.train()
    while step < a.steps:
        epoch = batches[:]
        rng.shuffle(epoch)
        for b in epoch:
            if step == a.steps:
                break
            start = time.perf_counter()
            step += 1
            src, tgt_in, tgt_out = collate([train[i] for i in b])
            lr = lr_at(step, a)
            for g in opt.param_groups:
                g["lr"] = lr
            logits = model(src, tgt_in)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1),
                                   ignore_index=PAD, label_smoothing=a.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if a.clip > 0:
                torch.nn.utils.clip_grad_norm_(params, a.clip)
            opt.step()
            value = loss.item()
            train_seconds += time.perf_counter() - start
            train_tokens += int((tgt_out != PAD).sum())
            loss_sum, loss_n = loss_sum + value, loss_n + 1
            if step % a.log_every == 0 or step == a.steps:
                print(f"step {step}/{a.steps}  loss {loss_sum / loss_n:.4f}  lr {lr:.3g}  "
                      f"{train_tokens / train_seconds:,.0f} tok/s", flush=True)
                loss_sum, loss_n = 0.0, 0
            if (a.eval_every and step % a.eval_every == 0) or step == a.steps:
                vloss = valid_loss(model, valid, a.max_tokens)
                print(f"eval step {step}: valid loss {vloss:.4f}", flush=True)
    return step, train_seconds, train_tokens, vloss


def main():
    a = parse_args()
    t0 = time.perf_counter()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.backends.mkldnn.enabled = a.mkldnn == "on"
    torch.manual_seed(a.seed)
    warnings.filterwarnings("ignore", message=".*enable_nested_tensor.*")
    src_sp, tgt_sp = Subwords(a.spm_src), Subwords(a.spm_tgt)
    split = {n: read_split(os.path.join(a.data, n + ".tsv")) for n in ("train", "valid", "test")}
    train = encode_split(split["train"], src_sp, tgt_sp, a.max_len, "train")
    valid = encode_split(split["valid"], src_sp, tgt_sp, a.max_len, "valid")[: a.eval_size]
    test = encode_split(split["test"], src_sp, tgt_sp, a.max_len, "test")

    model = Translator(a, src_sp.size, tgt_sp.size)
    params = list(model.parameters())
    opt = make_optimizer(a, params)
    batches = token_batches(train, a.max_tokens)
    print(f"torch {torch.__version__} | {torch.get_num_threads()} thread(s), interop 1 | "
          f"{len(train)} train, {len(valid)} valid, {len(test)} test pairs | vocab {src_sp.size}/{tgt_sp.size} | "
          f"{sum(p.numel() for p in params):,} parameters (d_model {a.d_model}, {a.heads} heads, d_ff {a.d_ff}, "
          f"{a.enc_layers}+{a.dec_layers} layers, dropout {a.dropout}, pre-LN) | {a.optimizer} lr {a.lr} "
          f"{a.schedule} warmup {a.warmup} wd {a.weight_decay} clip {a.clip} ls {a.label_smoothing} | "
          f"{len(batches)} batches of <= {a.max_tokens} tokens | seed {a.seed}", flush=True)

    step, train_seconds, train_tokens, vloss = train_loop(model, opt, params, train, valid, batches, a)

    start = time.perf_counter()
    greedy_out, beam_out = decode_test(model, test, a)
    decode_seconds = time.perf_counter() - start
    write_lines(a.hyp_out, tgt_sp, beam_out if beam_out is not None else greedy_out)
    if a.greedy_out:
        write_lines(a.greedy_out, tgt_sp, greedy_out)
    how = f"beam {a.beam}, alpha {a.length_penalty}" if a.beam > 1 else "greedy"
    print(f"decoded {len(test)} test sentences ({how}) in {decode_seconds:.1f} s", flush=True)
    print(json.dumps({"steps": step, "seconds": round(train_seconds, 3),
                      "train_tokens_per_s": round(train_tokens / train_seconds, 1), "train_tokens": train_tokens,
                      "valid_loss": vloss, "decode_seconds": round(decode_seconds, 3),
                      "wall_seconds": round(time.perf_counter() - t0, 3), "test_hypotheses": a.hyp_out}))


if __name__ == "__main__":
    main()
