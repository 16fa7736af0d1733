#!/usr/bin/python3
"""Reference values from PyTorch for attograd's tests.

Run with the system Python that has torch:

    /usr/bin/python3 tools/make_torch_fixtures.py            # every group
    /usr/bin/python3 tools/make_torch_fixtures.py optim      # some groups

Each fixture group is one function below that writes safetensors files (float64)
under tests/fixtures/<group>/; add a group by writing a function and listing it
in GROUPS. Everything is seeded, so a rerun writes identical bytes.
"""

import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io as st  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F64 = torch.float64


def fixture_path(group, name):
    d = os.path.join(ROOT, "tests", "fixtures", group)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def write(group, name, tensors, metadata):
    path = fixture_path(group, name)
    st.save(path, tensors, metadata={k: json.dumps(v, sort_keys=True) for k, v in metadata.items()})
    print(f"wrote {os.path.relpath(path, ROOT)} ({len(tensors)} tensors, {os.path.getsize(path)} bytes)")


# ---- optim: optimizer trajectories -------------------------------------------

OPTIM_SHAPES = [(3, 4), (5,), (2, 1, 3)]
OPTIM_STEPS = 10
# Gradient size per step: rising and falling, so that amsgrad's running max matters.
OPTIM_GRAD_SCALES = [2.0, 0.1, 1.0, 0.05, 3.0, 0.2, 0.5, 0.01, 1.5, 0.3]
# Steps (0-based) where a parameter has no gradient and must be skipped.
OPTIM_MISSING = {2: [0, 5]}

# name -> (torch.optim class name, constructor options, parameter groups or None).
# Group entries: parameter indices plus that group's lr / weight_decay.
OPTIM_CONFIGS = {
    "sgd": ("SGD", {"lr": 0.1}, None),
    "sgd_momentum": ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.3, "weight_decay": 0.01}, None),
    "sgd_nesterov": ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}, None),
    "sgd_groups": ("SGD", {"lr": 0.05, "momentum": 0.8},
                   [{"params": [0, 2], "lr": 0.02, "weight_decay": 0.1}, {"params": [1]}]),
    "adam": ("Adam", {"lr": 0.01}, None),
    "adam_weight_decay": ("Adam", {"lr": 0.01, "betas": [0.8, 0.99], "eps": 1e-6, "weight_decay": 0.1}, None),
    "adam_amsgrad": ("Adam", {"lr": 0.01, "weight_decay": 0.05, "amsgrad": True}, None),
    "adamw": ("AdamW", {"lr": 0.01}, None),
    "adamw_amsgrad": ("AdamW", {"lr": 0.02, "betas": [0.85, 0.995], "weight_decay": 0.1, "amsgrad": True}, None),
    "adamw_groups": ("AdamW", {"lr": 0.01},
                     [{"params": [0, 1], "lr": 0.01, "weight_decay": 0.2}, {"params": [2], "lr": 0.03, "weight_decay": 0.0}]),
}


def optim_inputs():
    """Initial parameters, the gradient sequence, and which gradients exist."""
    gen = torch.Generator().manual_seed(20240601)
    init = [torch.randn(s, generator=gen, dtype=F64) for s in OPTIM_SHAPES]
    grads = []
    for i, s in enumerate(OPTIM_SHAPES):
        g = torch.randn((OPTIM_STEPS,) + s, generator=gen, dtype=F64)
        g *= torch.tensor(OPTIM_GRAD_SCALES, dtype=F64).reshape((OPTIM_STEPS,) + (1,) * len(s))
        for k in OPTIM_MISSING.get(i, []):
            g[k] = 0
        grads.append(g)
    has_grad = torch.ones(OPTIM_STEPS, len(OPTIM_SHAPES), dtype=torch.int64)
    for i, steps in OPTIM_MISSING.items():
        for k in steps:
            has_grad[k, i] = 0
    return init, grads, has_grad


def run_optimizer(kind, options, groups, init, grads, has_grad):
    params = [p.clone().requires_grad_() for p in init]
    opts = dict(options)
    if "betas" in opts:
        opts["betas"] = tuple(opts["betas"])
    if groups is None:
        opt = getattr(torch.optim, kind)(params, **opts)
    else:
        torch_groups = []
        for g in groups:
            tg = {k: v for k, v in g.items() if k != "params"}
            tg["params"] = [params[i] for i in g["params"]]
            torch_groups.append(tg)
        opt = getattr(torch.optim, kind)(torch_groups, **opts)
    traj = [torch.empty((OPTIM_STEPS,) + s, dtype=F64) for s in OPTIM_SHAPES]
    for k in range(OPTIM_STEPS):
        for i, p in enumerate(params):
            p.grad = grads[i][k].clone() if has_grad[k, i] else None
        opt.step()
        for i, p in enumerate(params):
            traj[i][k] = p.detach()
    return traj


def optim_fixtures():
    """tests/fixtures/optim/optimizers.safetensors

    init.<i>              parameter i before the first step
    grad.<i>              [steps, ...] its gradient at each step (zeros where it has none)
    has_grad              i64 [steps, params]: 0 where parameter i has no gradient (.grad = None)
    <config>.param.<i>    [steps, ...] parameter i after each step
    metadata <config>     JSON {"optimizer", "options", "groups"} (torch.optim's arguments)
    """
    init, grads, has_grad = optim_inputs()
    tensors = {"has_grad": has_grad}
    for i in range(len(OPTIM_SHAPES)):
        tensors[f"init.{i}"] = init[i]
        tensors[f"grad.{i}"] = grads[i]
    metadata = {}
    for name, (kind, options, groups) in OPTIM_CONFIGS.items():
        traj = run_optimizer(kind, options, groups, init, grads, has_grad)
        for i, t in enumerate(traj):
            tensors[f"{name}.param.{i}"] = t
        metadata[name] = {"optimizer": kind, "options": options, "groups": groups}
    write("optim", "optimizers.safetensors", tensors, metadata)


# ---- optim: gradient clipping ------------------------------------------------

# name -> (kind, arguments); norm_type "inf" is math.inf.
CLIP_CASES = {
    "norm2": ("norm", {"max_norm": 1.0, "norm_type": 2.0}),
    "norm_inf": ("norm", {"max_norm": 0.5, "norm_type": "inf"}),
    "norm3": ("norm", {"max_norm": 2.0, "norm_type": 3.0}),
    "norm1_unclipped": ("norm", {"max_norm": 1000.0, "norm_type": 1.0}),
    "value": ("value", {"clip_value": 0.3}),
}


def clip_fixtures():
    """tests/fixtures/optim/clip.safetensors

    grad.<i>            the gradients before clipping
    <case>.grad.<i>     the gradients after torch.nn.utils.clip_grad_norm_ / clip_grad_value_
    <case>.total_norm   0-d, clip_grad_norm_'s return value (norm cases)
    metadata <case>     JSON {"kind": "norm" | "value", "args": {...}}
    """
    gen = torch.Generator().manual_seed(7)
    shapes = [(4, 3), (6,), (2, 2, 2)]
    grads = [torch.randn(s, generator=gen, dtype=F64) * (i + 1) for i, s in enumerate(shapes)]
    tensors = {f"grad.{i}": g for i, g in enumerate(grads)}
    metadata = {}
    for name, (kind, args) in CLIP_CASES.items():
        params = [torch.zeros(s, dtype=F64, requires_grad=True) for s in shapes]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        if kind == "norm":
            norm_type = math.inf if args["norm_type"] == "inf" else args["norm_type"]
            total = torch.nn.utils.clip_grad_norm_(params, args["max_norm"], norm_type=norm_type)
            tensors[f"{name}.total_norm"] = total.detach().to(F64)
        else:
            torch.nn.utils.clip_grad_value_(params, args["clip_value"])
        for i, p in enumerate(params):
            tensors[f"{name}.grad.{i}"] = p.grad
        metadata[name] = {"kind": kind, "args": args}
    write("optim", "clip.safetensors", tensors, metadata)


# ---- nn: LayerNorm, MultiheadAttention, Seq2SeqTransformer (tools/nn_fixtures.py) ----

def nn_fixtures():
    import nn_fixtures as nf
    nf.nn_fixtures(write)


GROUPS = {
    "optim": [optim_fixtures, clip_fixtures],
    "nn": [nn_fixtures],
}


def main(argv):
    names = argv or list(GROUPS)
    for name in names:
        if name not in GROUPS:
            sys.exit(f"unknown fixture group {name!r}; known: {', '.join(GROUPS)}")
        torch.set_default_dtype(F64)
        for make in GROUPS[name]:
            make()


if __name__ == "__main__":
    main(sys.argv[1:])
