#!/usr/bin/python3
"""One side of scripts/bench's translation row: training tokens/s of
`translate train` on real sentences against its PyTorch twin
(tools/translate_torch.py, stock torch.nn.Transformer), on the same prepared
corpus, the same SentencePiece model, the same config, optimizer, schedule and
token budget.

    /usr/bin/python3 tools/bench_translate.py --side attograd --work DIR --steps N --threads T
    /usr/bin/python3 tools/bench_translate.py --side pytorch  --work DIR --steps N --threads T --mkldnn on

DIR is made on first use: `translate prepare --corpus gettext --tgt fr` (the
gettext corpus scripts/setup installs), its valid and test parts cut to 20
pairs each (the row times training, not decoding), and a `translate train`
run of 1 step whose checkpoint directory holds the SentencePiece model both
sides then read. Both sides train --steps steps with no evaluation but the
final one and report target tokens over training time, the first steps
included; tokens/s counts the non-pad target tokens of the batches, as both
programs count them. Prints one `bench ...` line for tools/bench_table.py,
with the peak RSS of the run.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRANSLATE = os.path.join(ROOT, "build", "bin", "translate")
# translate train's text defaults (examples/translate/main.cpp: text_model, text_training), spelled out for both.
MODEL = ["--d-model", "128", "--heads", "4", "--d-ff", "512", "--enc-layers", "2", "--dec-layers", "2",
         "--dropout", "0.1", "--max-len", "128"]
TRAINING = ["--lr", "2e-3", "--schedule", "inverse-sqrt", "--warmup", "300", "--label-smoothing", "0.1",
            "--max-tokens", "4096", "--beam", "1"]


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"bench_translate: {' '.join(cmd[:3])} failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


def prepare(work):
    """The corpus and the SentencePiece model, made once per work directory."""
    spm = os.path.join(work, "spm", "sentencepiece.model")
    if os.path.exists(spm):
        return spm
    corpus = os.path.join(work, "corpus")
    run([TRANSLATE, "prepare", "--corpus", "gettext", "--tgt", "fr", "--out", corpus])
    for part in ("valid.tsv", "test.tsv"):
        path = os.path.join(corpus, part)
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()[:21]  # the header and 20 pairs
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(lines)
    shutil.rmtree(os.path.join(work, "spm"), ignore_errors=True)
    run([TRANSLATE, "train", "--corpus", corpus, "--tgt", "fr", "--steps", "1", "--eval-every", "0", "--quiet",
         "--samples", "0", "--threads", "1", "--checkpoint-dir", os.path.join(work, "spm")] + MODEL + TRAINING)
    return spm


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--side", choices=["attograd", "pytorch"], required=True)
    p.add_argument("--work", required=True, help="directory for the prepared corpus and the runs")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--mkldnn", choices=["on", "off"], default="on", help="PyTorch only")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    spm = prepare(a.work)
    corpus = os.path.join(a.work, "corpus")
    common = ["--steps", str(a.steps), "--threads", str(a.threads), "--eval-every", "0"]
    if a.side == "attograd":
        log = os.path.join(a.work, "attograd.jsonl")
        if os.path.exists(log):
            os.remove(log)
        run([TRANSLATE, "train", "--corpus", corpus, "--tgt", "fr", "--log", log, "--log-every", str(a.steps),
             "--quiet", "--samples", "0", "--vocab-size", "2000"] + MODEL + TRAINING + common)
        with open(log) as f:
            last = [json.loads(line) for line in f if '"tokens_per_s"' in line][-1]
        tok_s, seconds = last["tokens_per_s"], last["elapsed_s"]
        kernel = run([os.path.join(ROOT, "build", "bin", "bench"), "--config", "tiny", "--threads", "1", "--warmup",
                      "0", "--steps", "1"]).split(" kernel=")[1].split()[0]
        extra = f"kernel={kernel}"
    else:
        env = dict(os.environ)
        if a.threads > 1:
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        cmd = ["/usr/bin/python3", os.path.join(ROOT, "tools", "translate_torch.py"), "--data", corpus,
               "--spm-src", spm, "--spm-tgt", spm, "--hyp-out", os.path.join(a.work, "pytorch.hyp"),
               "--log-every", str(a.steps)] + MODEL + TRAINING + common
        cmd += ["--mkldnn", a.mkldnn]
        out = run(cmd, env=env)
        last = json.loads(out.strip().splitlines()[-1])
        tok_s, seconds = last["train_tokens_per_s"], last["seconds"]
        extra = (f"kernel={os.environ.get('OPENBLAS_CORETYPE', 'unset')} mkldnn={a.mkldnn} "
                 f"omp_wait={env.get('OMP_WAIT_POLICY', 'unset')} interop=1")
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"bench framework={a.side} mode=train config=translate threads={a.threads} steps={a.steps} "
          f"step_ms={1000 * seconds / a.steps:.1f} tok_s={tok_s:.0f} peak_rss_mb={rss_mb:.1f} {extra}")


if __name__ == "__main__":
    main()
