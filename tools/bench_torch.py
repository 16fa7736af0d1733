#!/usr/bin/python3
"""PyTorch's side of examples/bench: the same models, step, data and output lines.

    /usr/bin/python3 tools/bench_torch.py [--config tiny|base|lm|all] [--threads 1,2] [--warmup 5] [--steps 50] [--mkldnn on|off]
    /usr/bin/python3 tools/bench_torch.py --decode [--lengths 32,128] [--decode-batch 64]

tiny and base are the PyTorch twin of attograd's Seq2SeqTransformer
(tools/torch_twin.py: torch.nn Embedding, batch_first MultiheadAttention,
LayerNorm, Linear), pre-LN, dropout 0. A training step is forward +
cross-entropy + backward + torch.optim.Adam step + zero_grad(set_to_none=True)
on the same copy-task batch shapes as examples/bench (src [B, L] random
symbols, tgt_in = [BOS, src[:-1]], tgt_out = src). lm is the twin GPT of
tools/lm_torch.py (torch_twin.GPT, GPT-2 init, the lm program's default shape:
4 layers, d_model 128, 4 heads, MLP 512, context 128, the 114 characters of
the fortunes) trained with Adam on batches of 32 random windows of 129 tokens
(inputs w[:, :-1], targets w[:, 1:]). Decoding is the usual no-cache greedy
loop (the decoder re-runs on the whole prefix each step).

PyTorch at its best settings:
  - threads: torch.set_num_threads(n) for PyTorch's own parallel loops, and the
    same n for OpenBLAS (openblas_set_num_threads, the library torch calls for
    GEMM), inter-op threads 1. They never nest: GEMMs are called outside
    PyTorch's parallel regions.
  - OMP_WAIT_POLICY=PASSIVE when any run of this process uses more than one
    thread: otherwise PyTorch's idle OpenMP threads spin against OpenBLAS's
    and its 2-thread runs can be slower than its 1-thread runs.
  - --mkldnn on|off sets torch.backends.mkldnn.enabled; scripts/bench runs
    both and reports the faster per row.
  - OpenBLAS' kernel is chosen as attograd chooses it
    (attograd/autograd/backend/blas_kernel.h): when OPENBLAS_CORETYPE is unset and the
    library falls back to a generic kernel on a CPU with AVX2/AVX-512, the
    script sets OPENBLAS_CORETYPE.
The environment variables are read when the libraries load, so the script
sets them and re-executes itself once, before torch is imported. Every output
line names the settings that ran (mkldnn, omp_wait, interop).
The FLOP count is examples/bench's (see its header comment).
"""
import argparse
import ctypes
import ctypes.util
import os
import resource
import statistics
import sys
import time

GENERIC_CORES = {"prescott", "katmai", "coppermine", "northwood", "core2", "penryn", "dunnington", "nehalem",
                 "atom", "opteron", "barcelona", "unknown", ""}
MARKER = "ATTOGRAD_BENCH_ENV_SET"


def openblas():
    """The OpenBLAS that torch's GEMMs go to (Debian: libblas.so.3 -> openblas-pthread)."""
    for name in ("libblas.so.3", ctypes.util.find_library("openblas") or "libopenblas.so.0"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib
        except (OSError, AttributeError):
            continue
    return None


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def best_core(flags):
    # As attograd/autograd/backend/blas_kernel.h: SkylakeX for any AVX-512 CPU, since
    # OpenBLAS 0.3.21 refuses OPENBLAS_CORETYPE=Cooperlake ("Core not found")
    # and its Cooperlake adds only bf16 kernels to SkylakeX's sgemm/dgemm.
    avx512 = {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags
    if avx512:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return ""


def fast_blas_kernel(lib):
    """The OPENBLAS_CORETYPE to set, or None when the library's own choice is fine."""
    if lib is None or "OPENBLAS_CORETYPE" in os.environ:
        return None
    if lib.openblas_get_corename().decode().lower() not in GENERIC_CORES:
        return None
    return best_core(cpu_flags()) or None


def ensure_environment(lib, max_threads):
    """Sets the variables the libraries read at load time and re-executes once."""
    if MARKER in os.environ:
        return
    wanted = {}
    core = fast_blas_kernel(lib)
    if core:
        wanted["OPENBLAS_CORETYPE"] = core
    if max_threads > 1 and "OMP_WAIT_POLICY" not in os.environ:
        wanted["OMP_WAIT_POLICY"] = "PASSIVE"
    if wanted:
        os.environ.update(wanted)
        os.environ[MARKER] = "1"
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable] + sys.argv)


CONFIGS = {
    "tiny": dict(vocab=16, len=16, batch=64, d_model=64, heads=4, d_ff=256, layers=2),
    "base": dict(vocab=64, len=32, batch=32, d_model=256, heads=8, d_ff=1024, layers=2),
    "lm": dict(vocab=114, len=128, batch=32, d_model=128, heads=4, d_ff=512, layers=4),
}
BOS, FIRST_SYMBOL, PAD = 1, 3, 0


def forward_flops(c, name):
    B, L, E, F, V, n = c["batch"], c["len"], c["d_model"], c["d_ff"], c["vocab"], c["layers"]
    if name == "lm":
        return n * (8 * B * L * E * E + 4 * B * L * L * E + 4 * B * L * E * F) + 2 * B * L * E * V
    enc = 8 * B * L * E * E + 4 * B * L * L * E + 4 * B * L * E * F
    dec = 16 * B * L * E * E + 8 * B * L * L * E + 4 * B * L * E * F
    return n * enc + n * dec + 2 * B * L * E * V


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def make_model(torch, tt, c, seed, name="base"):
    torch.manual_seed(seed)
    if name == "lm":
        cfg = tt.GPTConfig(vocab=c["vocab"], context=c["len"], d_model=c["d_model"], heads=c["heads"],
                           d_ff=c["d_ff"], layers=c["layers"], init="gpt2")
        return tt.GPT(cfg).float()
    cfg = tt.Config(src_vocab=c["vocab"], tgt_vocab=c["vocab"], d_model=c["d_model"], heads=c["heads"],
                    d_ff=c["d_ff"], enc_layers=c["layers"], dec_layers=c["layers"], dropout=0.0, max_len=256)
    return tt.Seq2SeqTransformer(cfg).float()


def make_batch(torch, c, gen, batch=None):
    B = batch or c["batch"]
    src = torch.randint(FIRST_SYMBOL, c["vocab"], (B, c["len"]), generator=gen)
    tgt_in = torch.cat([torch.full((B, 1), BOS, dtype=torch.long), src[:, :-1]], dim=1)
    return src, tgt_in, src.clone()


def make_windows(torch, c, gen):
    """lm: [B, T + 1] token windows (id 0, <unk>, never drawn)."""
    return torch.randint(1, c["vocab"], (c["batch"], c["len"] + 1), generator=gen)


def train_loss(torch, model, name, c, batch):
    V = c["vocab"]
    if name == "lm":
        logits = model(batch[:, :-1])
        return torch.nn.functional.cross_entropy(logits.reshape(-1, V), batch[:, 1:].reshape(-1))
    src, tgt_in, tgt_out = batch
    logits = model(src, tgt_in)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=PAD)


def set_threads(torch, lib, n):
    torch.set_num_threads(n)
    if lib is not None:
        lib.openblas_set_num_threads(n)


def prefix(torch, mode, name, threads, kernel):
    return (f"bench framework=pytorch mode={mode} config={name} threads={threads} kernel={kernel} "
            f"mkldnn={'on' if torch.backends.mkldnn.enabled else 'off'} "
            f"omp_wait={os.environ.get('OMP_WAIT_POLICY', 'unset')} interop={torch.get_num_interop_threads()}")


def train_step_ms(torch, loss_of, opt, batches, warmup, steps):
    """The median milliseconds of a training step (forward, backward, optimizer
    step, gradients released) over `steps` steps after `warmup` untimed ones,
    cycling through batches; loss_of(batch) gives the loss."""
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        loss_of(batches[i % len(batches)]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = (time.perf_counter() - t0) * 1e3
        if i >= warmup:
            times.append(dt)
    return statistics.median(times)


def train_line(torch, name, threads, kernel, c, steps, step_ms, tail=""):
    """The train row scripts/bench's table reads (tail: extra key=value fields it ignores)."""
    tokens = c["batch"] * c["len"]
    print(f"{prefix(torch, 'train', name, threads, kernel)} steps={steps} step_ms={step_ms:.3f} "
          f"tok_s={tokens / (step_ms / 1e3):.0f} gflops={3 * forward_flops(c, name) / (step_ms / 1e3) / 1e9:.2f} "
          f"peak_rss_mb={peak_rss_mb():.1f}{' ' + tail if tail else ''}", flush=True)


def bench_train(torch, tt, lib, name, threads, warmup, steps, seed, kernel):
    c = CONFIGS[name]
    set_threads(torch, lib, threads)
    model = make_model(torch, tt, c, seed, name)
    model.train()
    opt = torch.optim.Adam(model.parameters())
    gen = torch.Generator().manual_seed(seed)
    batches = [make_windows(torch, c, gen) if name == "lm" else make_batch(torch, c, gen) for _ in range(8)]
    step_ms = train_step_ms(torch, lambda b: train_loss(torch, model, name, c, b), opt, batches, warmup, steps)
    train_line(torch, name, threads, kernel, c, steps, step_ms)


def greedy_no_cache(torch, model, src, length):
    memory = model.encode(src)
    tokens = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    for _ in range(length):
        logits = model.decode(tokens, memory)
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens


def decode_lines(torch, name, threads, kernel, decode, batch, lengths, repeats, tail=""):
    """Times decode(length) (greedy, no cache) `repeats` times per length after one
    short warm-up, and prints the decode rows scripts/bench's table reads."""
    decode(4)
    for length in lengths:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            decode(length)
            times.append((time.perf_counter() - t0) * 1e3)
        t = statistics.median(times)
        print(f"{prefix(torch, 'decode', name, threads, kernel)} batch={batch} len={length} cache=no ms={t:.3f} "
              f"tok_s={batch * length / (t / 1e3):.0f} peak_rss_mb={peak_rss_mb():.1f}{' ' + tail if tail else ''}",
              flush=True)


def bench_decode(torch, tt, lib, name, threads, batch, lengths, repeats, seed, kernel):
    c = CONFIGS[name]
    set_threads(torch, lib, threads)
    model = make_model(torch, tt, c, seed).eval()
    gen = torch.Generator().manual_seed(seed)
    src = make_batch(torch, c, gen, batch)[0]
    with torch.no_grad():
        decode_lines(torch, name, threads, kernel, lambda n: greedy_no_cache(torch, model, src, n), batch, lengths,
                     repeats)


def override_shape(ap, args):
    """--d-model, --len and --batch replace the configs' values (as examples/bench's)."""
    for c in CONFIGS.values():
        if args.d_model is not None:
            if args.d_model < c["heads"] or args.d_model % c["heads"]:
                ap.error(f"--d-model must be a positive multiple of the {c['heads']} heads, got {args.d_model}")
            c["d_model"], c["d_ff"] = args.d_model, 4 * args.d_model
        if args.len is not None:
            if not 2 <= args.len <= 256:
                ap.error(f"--len must be in [2, 256], got {args.len}")
            c["len"] = args.len
        if args.batch is not None:
            if args.batch < 1:
                ap.error(f"--batch must be >= 1, got {args.batch}")
            c["batch"] = args.batch


def int_list(s):
    try:
        vals = [int(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{s}'")
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"values must be >= 1, got '{s}'")
    return vals


def add_bench_flags(ap):
    """The flags of this script, which tools/bench_torch_fast.py takes too."""
    ap.add_argument("--config", choices=["tiny", "base", "lm", "all"], default="all")
    ap.add_argument("--threads", type=int_list, default=[1, 2])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--d-model", type=int, help="override the config's d_model; d_ff becomes 4 x d_model")
    ap.add_argument("--len", type=int, help="override the config's sequence length (2..256)")
    ap.add_argument("--batch", type=int, help="override the config's batch")
    ap.add_argument("--mkldnn", choices=["on", "off"], default="on",
                    help="torch.backends.mkldnn.enabled (PyTorch's default: on)")
    ap.add_argument("--decode", action="store_true", help="time greedy decoding on the base model")
    ap.add_argument("--lengths", type=int_list, default=[32, 128])
    ap.add_argument("--decode-batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)


def check_bench_flags(ap, args):
    """add_bench_flags' values checked, and the shape overrides applied to CONFIGS."""
    if args.steps < 1 or args.warmup < 0 or args.repeats < 1:
        ap.error("need --steps >= 1, --warmup >= 0, --repeats >= 1")
    override_shape(ap, args)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_flags(ap)
    args = ap.parse_args()
    check_bench_flags(ap, args)

    lib = openblas()
    ensure_environment(lib, max(args.threads))  # before torch loads (may re-execute this script once)
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_twin as tt
    torch.set_num_interop_threads(1)
    torch.backends.mkldnn.enabled = args.mkldnn == "on"
    kernel = lib.openblas_get_corename().decode() if lib is not None else "unknown"

    if args.decode:
        name = "tiny" if args.config == "tiny" else "base"
        for t in args.threads:
            bench_decode(torch, tt, lib, name, t, args.decode_batch, args.lengths, args.repeats, args.seed, kernel)
        return 0
    names = ["tiny", "base", "lm"] if args.config == "all" else [args.config]
    for name in names:
        for t in args.threads:
            bench_train(torch, tt, lib, name, t, args.warmup, args.steps, args.seed, kernel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
