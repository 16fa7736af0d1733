"""The PyTorch twins of attograd's Seq2SeqTransformer (attograd/nn/transformer.h) and
GPT (attograd/nn/gpt.h).

Built from torch.nn primitives (Embedding, batch-first MultiheadAttention,
LayerNorm, Linear), with the same structure and the same parameter names as
attograd's named_parameters(), except that PyTorch's MultiheadAttention packs
the q/k/v projections into one in_proj matrix. `from_attograd_state()` and
`to_attograd_state()` convert between the two naming schemes.
With kv_heads < heads (grouped-query attention) the decoder's attention is
GroupedQueryAttention below, which keeps attograd's q/k/v/out_proj names.

Used by tools/make_torch_fixtures.py, tools/load_in_torch.py and
tools/bench_torch.py. Needs Debian's python3-torch; run with /usr/bin/python3.
"""
import math

import torch
from torch import nn


class Config:
    """Mirrors attograd::TransformerConfig (its to_json() keys)."""

    def __init__(self, **kw):
        self.src_vocab = kw.get("src_vocab", 16)
        self.tgt_vocab = kw.get("tgt_vocab", 16)
        self.d_model = kw.get("d_model", 64)
        self.heads = kw.get("heads", 4)
        self.d_ff = kw.get("d_ff", 256)
        self.enc_layers = kw.get("enc_layers", 2)
        self.dec_layers = kw.get("dec_layers", 2)
        self.dropout = kw.get("dropout", 0.0)
        self.max_len = kw.get("max_len", 256)
        self.pre_ln = kw.get("pre_ln", True)
        self.tie_embeddings = kw.get("tie_embeddings", False)
        self.activation = kw.get("activation", "relu")
        self.pad_id = kw.get("pad_id", 0)
        self.layer_norm_eps = kw.get("layer_norm_eps", 1e-5)
        self.kv_heads = kw.get("kv_heads", self.heads)  # the decoder's K/V heads (grouped-query attention)

    def to_json(self):
        return dict(self.__dict__)


def sinusoidal_table(max_len, dim):
    """pe[p, 2i] = sin(p / 10000^(2i/E)), pe[p, 2i+1] = cos(same)."""
    pe = torch.zeros(max_len, dim, dtype=torch.float64)
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    freq = torch.pow(10000.0, -torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return pe


class FeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.linear1 = nn.Linear(c.d_model, c.d_ff)
        self.dropout = nn.Dropout(c.dropout)
        self.linear2 = nn.Linear(c.d_ff, c.d_model)
        self.act = nn.GELU() if c.activation == "gelu" else nn.ReLU()

    def forward(self, x):
        return self.linear2(self.dropout(self.act(self.linear1(x))))


def mha(c, kv_heads=None):
    """PyTorch's MultiheadAttention, or the GroupedQueryAttention twin when kv_heads < heads."""
    if kv_heads is not None and kv_heads != c.heads:
        assert c.dropout == 0, "the GroupedQueryAttention twin has no attention dropout"
        return GroupedQueryAttention(c.d_model, c.heads, kv_heads)
    return nn.MultiheadAttention(c.d_model, c.heads, dropout=c.dropout, batch_first=True)


class GroupedQueryAttention(nn.Module):
    """The twin of attograd's MultiHeadAttention with num_kv_heads G < H:
    k_proj, v_proj map E -> G*D, and each K/V head is repeated for the H/G query
    heads of its group (repeat_interleave on the head dim). Parameter names are
    attograd's (no packed in_proj). Batch-first; returns (out, weights [B, H, T, S])."""

    def __init__(self, embed_dim, num_heads, num_kv_heads):
        super().__init__()
        assert embed_dim % num_heads == 0 and num_heads % num_kv_heads == 0
        self.H, self.G, self.D = num_heads, num_kv_heads, embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * self.D)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * self.D)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _heads(self, x, n):
        return x.reshape(x.shape[0], x.shape[1], n, self.D).transpose(1, 2)  # [B, n, L, D]

    def forward(self, query, key, value, key_padding_mask=None, is_causal=False, attn_mask=None, need_weights=True):
        """attn_mask [T, S]: bool (True = not allowed), as nn.MultiheadAttention takes it."""
        B, T, E = query.shape
        S = key.shape[1]
        q = self._heads(self.q_proj(query), self.H)
        k = self._heads(self.k_proj(key), self.G).repeat_interleave(self.H // self.G, dim=1)
        v = self._heads(self.v_proj(value), self.G).repeat_interleave(self.H // self.G, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.D)  # [B, H, T, S]
        if is_causal:
            scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), float("-inf"))
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask, float("-inf"))
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        weights = scores.softmax(-1)
        out = (weights @ v).transpose(1, 2).reshape(B, T, E)
        return self.out_proj(out), weights


class EncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.pre_ln = c.pre_ln
        self.self_attn = mha(c)
        self.ff = FeedForward(c)
        self.norm1 = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.norm2 = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.dropout1 = nn.Dropout(c.dropout)
        self.dropout2 = nn.Dropout(c.dropout)

    def _sa(self, h, kpm):
        return self.dropout1(self.self_attn(h, h, h, key_padding_mask=kpm, need_weights=False)[0])

    def forward(self, x, kpm):
        if self.pre_ln:
            h = x + self._sa(self.norm1(x), kpm)
            return h + self.dropout2(self.ff(self.norm2(h)))
        h = self.norm1(x + self._sa(x, kpm))
        return self.norm2(h + self.dropout2(self.ff(h)))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.pre_ln = c.pre_ln
        self.self_attn = mha(c, c.kv_heads)
        self.cross_attn = mha(c, c.kv_heads)
        self.ff = FeedForward(c)
        self.norm1 = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.norm2 = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.norm3 = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.dropout1 = nn.Dropout(c.dropout)
        self.dropout2 = nn.Dropout(c.dropout)
        self.dropout3 = nn.Dropout(c.dropout)

    def forward(self, x, memory, causal, tgt_kpm, mem_kpm):
        def sa(h):
            return self.dropout1(self.self_attn(h, h, h, attn_mask=causal, key_padding_mask=tgt_kpm,
                                                need_weights=False)[0])

        def ca(h):
            return self.dropout2(self.cross_attn(h, memory, memory, key_padding_mask=mem_kpm, need_weights=False)[0])

        if self.pre_ln:
            h = x + sa(self.norm1(x))
            h = h + ca(self.norm2(h))
            return h + self.dropout3(self.ff(self.norm3(h)))
        h = self.norm1(x + sa(x))
        h = self.norm2(h + ca(h))
        return self.norm3(h + self.dropout3(self.ff(h)))


class Stack(nn.Module):
    def __init__(self, layer, n, c):
        super().__init__()
        self.layers = nn.ModuleList([layer(c) for _ in range(n)])
        self.norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps) if c.pre_ln else None


class Seq2SeqTransformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.src_embed = nn.Embedding(c.src_vocab, c.d_model, padding_idx=c.pad_id)
        self.tgt_embed = nn.Embedding(c.tgt_vocab, c.d_model, padding_idx=c.pad_id)
        self.register_buffer("pe", sinusoidal_table(c.max_len, c.d_model), persistent=False)
        self.embed_dropout = nn.Dropout(c.dropout)
        self.encoder = Stack(EncoderLayer, c.enc_layers, c)
        self.decoder = Stack(DecoderLayer, c.dec_layers, c)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab)
        if c.tie_embeddings:
            self.generator.weight = self.tgt_embed.weight

    def _embed(self, emb, ids):
        x = emb(ids) * math.sqrt(self.c.d_model)
        return self.embed_dropout(x + self.pe[: ids.shape[1]].to(x.dtype))

    def encode(self, src, src_kpm=None):
        h = self._embed(self.src_embed, src)
        for layer in self.encoder.layers:
            h = layer(h, src_kpm)
        return self.encoder.norm(h) if self.encoder.norm is not None else h

    def decode(self, tgt, memory, mem_kpm=None, tgt_kpm=None):
        T = tgt.shape[1]
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = not allowed
        h = self._embed(self.tgt_embed, tgt)
        for layer in self.decoder.layers:
            h = layer(h, memory, causal, tgt_kpm, mem_kpm)
        if self.decoder.norm is not None:
            h = self.decoder.norm(h)
        return self.generator(h)

    def forward(self, src, tgt_in, src_kpm=None, tgt_kpm=None):
        return self.decode(tgt_in, self.encode(src, src_kpm), src_kpm, tgt_kpm)


class GPTConfig:
    """Mirrors attograd::GPTConfig (its to_json() keys)."""

    def __init__(self, **kw):
        self.vocab = kw.get("vocab", 256)
        self.context = kw.get("context", 128)
        self.d_model = kw.get("d_model", 128)
        self.heads = kw.get("heads", 4)
        self.d_ff = kw.get("d_ff", 512)
        self.layers = kw.get("layers", 4)
        self.dropout = kw.get("dropout", 0.0)
        self.positions = kw.get("positions", "learned")
        self.tie_embeddings = kw.get("tie_embeddings", True)
        self.init = kw.get("init", "pytorch")
        self.layer_norm_eps = kw.get("layer_norm_eps", 1e-5)
        self.activation = "gelu"

    def to_json(self):
        return {k: v for k, v in self.__dict__.items() if k != "activation"}


class GPTBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln1 = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.attn = nn.MultiheadAttention(c.d_model, c.heads, dropout=c.dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.mlp = FeedForward(c)
        self.drop1 = nn.Dropout(c.dropout)
        self.drop2 = nn.Dropout(c.dropout)

    def forward(self, x, causal):
        h = self.ln1(x)
        x = x + self.drop1(self.attn(h, h, h, attn_mask=causal, need_weights=False)[0])
        return x + self.drop2(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    """The twin of attograd's GPT (attograd/nn/gpt.h), same parameter names."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_embed = nn.Embedding(c.vocab, c.d_model)
        if c.positions == "learned":
            self.pos = nn.Module()
            self.pos.weight = nn.Parameter(torch.randn(c.context, c.d_model))
        else:
            self.register_buffer("pe", sinusoidal_table(c.context, c.d_model), persistent=False)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList([GPTBlock(c) for _ in range(c.layers)])
        self.ln_f = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.lm_head = nn.Linear(c.d_model, c.vocab, bias=False)
        if c.init == "gpt2":
            self.init_gpt2()
        if c.tie_embeddings:
            self.lm_head.weight = self.tok_embed.weight

    def init_gpt2(self):
        residual_std = 0.02 / math.sqrt(2 * self.c.layers)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("out_proj.weight") or name.endswith("linear2.weight"):
                    nn.init.normal_(p, 0.0, residual_std)
                elif ".ln" in name or name.startswith("ln_f"):
                    continue
                elif name.endswith("bias"):
                    nn.init.zeros_(p)
                else:
                    nn.init.normal_(p, 0.0, 0.02)

    def forward(self, ids):
        T = ids.shape[1]
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = not allowed
        x = self.tok_embed(ids)
        x = x + (self.pos.weight[:T] if self.c.positions == "learned" else self.pe[:T].to(x.dtype))
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, causal)
        return self.lm_head(self.ln_f(x))


ATTN = ("self_attn", "cross_attn", "attn")


def to_attograd_state(model, grads=False):
    """The twin's parameters (or, with grads, their gradients) under
    attograd's names (q/k/v split out)."""
    out = {}
    for name, param in model.named_parameters():
        p = param.grad if grads else param
        if p is None:
            continue
        parts = name.split(".")
        if len(parts) >= 2 and parts[-2] in ATTN and parts[-1] in ("in_proj_weight", "in_proj_bias"):
            prefix = ".".join(parts[:-1])
            kind = "weight" if parts[-1] == "in_proj_weight" else "bias"
            for proj, chunk in zip(("q_proj", "k_proj", "v_proj"), p.chunk(3, dim=0)):
                out[f"{prefix}.{proj}.{kind}"] = chunk
        else:
            out[name] = p
    if isinstance(model, GPT):
        return out
    if model.c.tie_embeddings:
        out["generator.weight"] = model.tgt_embed.weight.grad if grads else model.tgt_embed.weight
    return out


def from_attograd_state(model, state):
    """Loads attograd-named tensors (a dict of torch tensors) into the twin."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            parts = name.split(".")
            if len(parts) >= 2 and parts[-2] in ATTN and parts[-1] in ("in_proj_weight", "in_proj_bias"):
                prefix = ".".join(parts[:-1])
                kind = "weight" if parts[-1] == "in_proj_weight" else "bias"
                p.copy_(torch.cat([state[f"{prefix}.{proj}.{kind}"] for proj in ("q_proj", "k_proj", "v_proj")]))
            else:
                p.copy_(state[name])
