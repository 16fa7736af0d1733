"""The heads study's grids as data (issue 31): the Grid, the lm and translate
grids and the quick ones CI runs, each run's command line, and the grid a
study directory holds (grid.json, frozen on first use).

A grid is chosen by name (--grid lm or translate-LANG) with the flags given
and the grid's defaults for the rest; tools/heads_study.py is the command line.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

SCHEDULE_NOTE = ("schedule: linear warmup then a constant lr (--schedule warmup), not a decaying one (lm's cosine, "
                 "translate's inverse square root): a cosine decay to its floor at the budget flattens every curve by "
                 "construction, and any decay shrinks the steps and with them the slope of the held-out loss, so the "
                 "convergence rule would measure the schedule, not learning that stopped")


# ---------------------------------------------------------------------------
# The grid

@dataclass(frozen=True)
class Grid:
    """A grid's shared settings. program: the C++ program that trains (lm or
    translate); model: its model and training flags (fixed width); text: None
    for lm's default (the fortunes); task: translate's corpus and test flags;
    window: the evaluations the convergence rule fits; margin: the time-to-target
    level is the worst final held-out metric among the H-grid runs, that
    fraction worse."""
    name: str
    steps: int
    eval_every: int
    eval_size: int
    warmup: int
    heads: tuple
    seeds: tuple
    gqa_heads: int            # the H at which G varies (0: no GQA runs)
    gqa_groups: tuple
    control_heads: int        # the H of the no-causal control (0: none)
    control_seeds: tuple
    model: dict = field(default_factory=dict)
    text: str | None = None
    threads: int = 1
    # The convergence rule: the least-squares slope of the last `window` held-out
    # losses, per 1,000 steps, above -threshold of the final loss. Measured on
    # the first three H = 1 LM runs (3,000 steps, eval every 100): the slope's
    # standard error is 1.8-2.0% of the loss per 1k steps over 5 evaluations,
    # so a 0.5% threshold there judged noise (one run "converged" at +0.3%
    # while the 20-point fit fell 4.9%); over 20 evaluations it is 0.31-0.37%,
    # small enough against a 1% threshold.
    window: int = 20
    threshold: float = 0.01
    margin: float = 0.01
    program: str = "lm"
    task: dict = field(default_factory=dict)

    def evals(self):
        """The eval steps of every run: each eval_every, and the last step."""
        s = list(range(self.eval_every, self.steps + 1, self.eval_every))
        return s if s and s[-1] == self.steps else s + [self.steps]


# lm's default width (E 128, d_ff 512) with 2 blocks and a 64-token context
# instead of 4 and 128: a step costs 0.066-0.091 s instead of 0.33 s (one
# thread, two runs at once, Zen 5), so the 37 runs of 12,000 steps take about
# 10 core-hours, not 40. The question is the heads at a fixed width; depth and
# context are held fixed. The budget: at 3,000 steps no run met the
# convergence rule (held-out loss still falling about 5% per 1k steps), and
# power-law fits of those curves put the rule at 6,500-11,500 steps for 29 of
# the 34 runs that could be fitted; a run cannot grow later (its checkpoints
# are not kept), so the budget is set once, above them.
LM_MODEL = {"d-model": 128, "d-ff": 512, "layers": 2, "context": 64, "batch-size": 32}
# translate's defaults for real sentences (docs/translate.md, the tested config
# of its results table: 2+2 pre-LN layers, d_model 128, d_ff 512, dropout and
# label smoothing 0.1, batches of 4,096 tokens, peak lr 2e-3, a joint 2,000-piece
# vocabulary) written out, so grid.json records them. d_model 128 leaves
# D = 16 per head at H = 8. The lr is held at translate's peak instead of
# decaying from it (SCHEDULE_NOTE); the pilot's curves show whether that holds.
TRANSLATE_MODEL = {"d-model": 128, "d-ff": 512, "enc-layers": 2, "dec-layers": 2, "dropout": 0.1,
                   "label-smoothing": 0.1, "max-tokens": 4096, "lr": 0.002, "vocab-size": 2000}
GRID_DEFAULTS = {"lm": dict(steps=12000, eval_every=100, eval_size=200, warmup=60, seeds=5),
                 # eval_size 500: the whole valid part of a gettext corpus, so valid BLEU is over 500
                 # sentences; warmup 300: translate's tested warmup.
                 "translate": dict(steps=2000, eval_every=50, eval_size=500, warmup=300, seeds=5)}


def lm_grid(steps=12000, eval_every=100, eval_size=200, warmup=60, seeds=5, model=None):
    """The issue's LM grid at lm's default width: H in {1,2,4,8,16} x seeds; G in
    {1,2} at H = 8; the causal mask off at H = 4 for 2 seeds (the control)."""
    s = tuple(range(1, seeds + 1))
    return Grid("lm", steps, eval_every, eval_size, warmup, (1, 2, 4, 8, 16), s, 8, (1, 2), 4, s[:2],
                {**LM_MODEL, **(model or {})})


def translate_grid(lang, steps=2000, eval_every=50, eval_size=500, warmup=300, seeds=5, model=None):
    """The issue's translation arm on the gettext corpus en -> lang: H = 8 x
    seeds, no G and no causal control (a decoder needs its mask). The LM grid
    answers how H trades quality against compute; this arm asks what the heads
    of a real encoder-decoder learn, where the LM has one kind of attention:
    Michel et al.'s pruning within each attention kind and the roles of encoder,
    decoder-self and cross heads over 5 seeds, in a language that keeps
    English's word order (fr) and one that does not (ko). A full H x G grid at
    translate's 4,096-token batches is 30 runs of about 0.7 s per step per
    language, out of reach on 2 cores. Every run sees the same data: the split
    depends on --split-seed only (not --seed), and each run trains its
    SentencePiece model on that same training part with a fixed seed on one
    thread, so the models are byte-identical (the report checks the corpus hash
    and the model's SHA-256 across runs). eval_every 50: the convergence window
    of 20 evaluations spans the last 1,000 steps."""
    s = tuple(range(1, seeds + 1))
    return Grid(f"translate-{lang}", steps, eval_every, eval_size, warmup, (8,), s, 0, (), 0, (),
                {**TRANSLATE_MODEL, **(model or {})}, program="translate",
                task={"corpus": "gettext", "src": "en", "tgt": lang, "beam": 4})


def quick_grid(text):
    """The CI grid of lm: every part of the pipeline in seconds (3 evaluations per
    run, so the convergence window is 3), the no-mask control at H = 2 for seed 1."""
    model = {"d-model": 16, "d-ff": 64, "layers": 1, "context": 16, "batch-size": 8}
    return Grid("quick", 30, 10, 20, 5, (1, 2), (1, 2), 2, (1,), 2, (1,), model, str(text), 1, window=3)


def quick_translate_grid():
    """The CI grid of translate: the number-words corpus (no SentencePiece, a
    second a run), H in {1, 2} and G = 1 at H = 2, the test part decoded greedily;
    60 steps, so BLEU leaves 0 and its target means something."""
    model = {"d-model": 32, "d-ff": 64, "enc-layers": 1, "dec-layers": 1, "lr": 0.003}
    return Grid("quick-translate", 60, 20, 50, 10, (1, 2), (1, 2), 2, (1,), 0, (), model, window=3,
                program="translate", task={"corpus": "numbers", "tgt": "fr", "beam": 1})


def run_id(H, G, causal, seed):
    return f"H{H}-G{G}{'' if causal else '-nocausal'}-s{seed}"


def _flags(d):
    return [a for k, v in d.items() for a in (f"--{k}", str(v))]


def runs_of(grid: Grid):
    """The grid as data: one dict per run (id, H, G, causal, seed, steps, args:
    the program's train flags without the run's paths)."""
    configs = [(H, H, True, grid.seeds) for H in grid.heads]
    configs += [(grid.gqa_heads, G, True, grid.seeds) for G in grid.gqa_groups]
    if grid.control_heads:
        configs.append((grid.control_heads, grid.control_heads, False, grid.control_seeds))
    out = []
    for H, G, causal, seeds in configs:
        for seed in seeds:
            args = ["train"] + _flags(grid.task) + _flags(grid.model)
            args += ["--heads", str(H), "--kv-heads", str(G)] + ([] if causal else ["--no-causal"])
            args += ["--seed", str(seed), "--steps", str(grid.steps), "--schedule", "warmup",
                     "--warmup", str(grid.warmup), "--eval-every", str(grid.eval_every),
                     "--eval-size", str(grid.eval_size), "--log-every", str(grid.eval_every),
                     "--threads", str(grid.threads), "--samples", "0", "--quiet", "--keep-last", "1"]
            if grid.text:
                args += ["--text", grid.text]
            out.append(dict(id=run_id(H, G, causal, seed), H=H, G=G, causal=causal, seed=seed,
                            steps=grid.steps, program=grid.program, args=args))
    return out


def command(run, program, out):
    """The full command line of `run` (program: the lm or translate executable) in
    out/runs/<id>/, resuming its checkpoint when there is one.

    translate resumes only from a checkpoint that is there, and otherwise starts
    over with --overwrite: a start killed before its first checkpoint leaves
    nothing to keep but the directory's claim and perhaps its SentencePiece
    models, which a fresh start trains again, identically."""
    d = Path(out) / "runs" / run["id"]
    ckpt = d / "ckpt"
    resume = run.get("program", "lm") == "lm" or any(ckpt.glob("step-*.model.safetensors"))
    return [str(program)] + run["args"] + ["--log", str(d / "log.jsonl"), "--checkpoint-dir", str(ckpt),
                                           "--resume" if resume else "--overwrite"]


# ---------------------------------------------------------------------------
# A grid from the command line, and the grid a study directory holds

def parse_model(pairs):
    """--model K=V flags (a model or training flag of the program, without its --)
    into a dict; a value that reads as a number is kept as that number."""
    out = {}
    for text in pairs or []:
        k, sep, v = text.partition("=")
        if not sep or not k or not v or k.startswith("-"):
            raise SystemExit(f"heads_study: --model expects KEY=VALUE with the flag's name without --, e.g. "
                             f"d-model=256, got {text!r}")
        for conv in (int, float):
            try:
                v = conv(v)
                break
            except ValueError:
                continue
        out[k] = v
    return out


def grid_kind(name):
    if name == "lm":
        return "lm"
    if re.fullmatch(r"translate-[a-zA-Z_@]+", name):
        return "translate"
    raise SystemExit(f"heads_study: unknown --grid {name!r}; expected lm or translate-LANG (translate-fr, "
                     "translate-ko: the gettext corpus en -> LANG)")


def grid_from(args):
    """The grid of --grid, with the flags given and the grid's defaults for the rest."""
    kind = grid_kind(args.grid)
    flags = {k: getattr(args, k) for k in GRID_DEFAULTS[kind] if getattr(args, k, None) is not None}
    flags = {**GRID_DEFAULTS[kind], **flags}
    model = parse_model(args.model)
    if kind == "lm":
        return lm_grid(**flags, model=model)
    return translate_grid(args.grid.split("-", 1)[1], **flags, model=model)


def frozen_grid(grid: Grid, out):
    """grid.json under out: written on first use; another grid there is refused.
    Fields added since it was written take their defaults (an older LM grid's
    grid.json lacks program and task)."""
    path = Path(out) / "grid.json"
    mine = json.loads(json.dumps(asdict(grid)))
    if path.exists():
        saved = json.loads(json.dumps(asdict(saved_grid(out))))
        if saved != mine:
            diff = {k: (saved.get(k), mine.get(k)) for k in set(saved) | set(mine) if saved.get(k) != mine.get(k)}
            if not extends(diff):
                raise SystemExit(f"heads_study: {path} holds another grid (saved, now: {diff}); hint: the same "
                                 "flags, or another --out (a larger --steps alone extends the grid)")
            path.write_text(json.dumps(mine, indent=1) + "\n")
            if "steps" not in diff:
                print(f"note: {path}: the analysis settings change: {diff}")
                return grid
            (Path(out) / "plan.json").unlink(missing_ok=True)   # its parts were cut for the old budget
            print(f"note: {path}: the grid's budget grows from {diff['steps'][0]} to {diff['steps'][1]} steps; "
                  "every run resumes from its last checkpoint (after the warmup the lr is constant, so the longer "
                  "run is the run a larger budget would have made, bit for bit); plan.json is removed: `plan` splits "
                  "the remaining steps into new parts")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(mine, indent=1) + "\n")
    return grid


# Fields that only say how the runs are read, not how they are trained.
ANALYSIS_FIELDS = {"window", "threshold", "margin"}


def extends(diff):
    """Whether a grid differing from the saved one by `diff` (field -> (saved,
    now)) trains the same runs: only `steps` (which may only grow) and the
    analysis fields differ. Runs resume to a larger budget; with a decaying
    schedule that would not hold, and the grids' schedule is a constant lr after
    the warmup (SCHEDULE_NOTE)."""
    if not diff or not set(diff) <= {"steps"} | ANALYSIS_FIELDS:
        return False
    if "steps" not in diff:
        return True
    before, after = diff["steps"]
    return isinstance(before, int) and isinstance(after, int) and after > before


def saved_grid(out):
    path = Path(out) / "grid.json"
    if not path.exists():
        raise SystemExit(f"heads_study: {path} is missing: nothing was planned or run in {out}; hint: plan or run first")
    d = json.loads(path.read_text())
    return Grid(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
