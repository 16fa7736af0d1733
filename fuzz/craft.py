#!/usr/bin/env python3
"""Hostile variants of real attograd checkpoints, for the fuzz seeds and
regression inputs (fuzz/corpus/, fuzz/regressions/) and for the hostile-input
sweep (scripts/test.d/25-hostile.sh). Each edit rewrites a safetensors file in
place, keeping everything else as the programs wrote it (a data checksum in
the metadata is recomputed, as a forger would); the findings of the
reliability probe (issue 29) are named where they come from.

    craft.py config FILE KEY=JSON...  set fields of the model config (B1: d_ff=4611686018427387904)
    craft.py huge FILE [TENSOR]       the tensor (default: the first matrix) becomes shape [2^62] F32
                                      over 0 data bytes, its bytes cut out (B2)
    craft.py nan FILE                 every F32 value NaN
    craft.py overlap FILE [SHIFT]     the smallest tensor reads its bytes from inside the largest one's
                                      span, SHIFT bytes in (0: the same start), its own bytes cut out
    craft.py entries FILE N           N more tensors of shape [0] (B9: 40,000 took 11.8 s)
    craft.py truncate FILE N          keep the first N bytes
    craft.py train BUILD_DIR OUT      train the tiny checkpoints of the seeds into OUT/lm, OUT/copy,
                                      OUT/translate (the lm text: OUT/text.txt)
    craft.py seeds BUILD_DIR          train tiny lm, copy_task and translate checkpoints with BUILD_DIR/bin's
                                      programs (and a grouped-query one with heads_study --convert-gqa),
                                      then write the seeds and regression inputs

Only the standard library: no numpy, torch or safetensors package needed.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIG = 2**62


def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def write(path, header, data):
    """Writes the file; a "crc32" in the metadata is made to match the new data, as a forger would."""
    if "crc32" in header.get("__metadata__", {}):
        crc = 0
        for name, v in sorted(tensors(header).items()):
            crc = zlib.crc32(data[v["data_offsets"][0]:v["data_offsets"][1]], crc)
        header["__metadata__"]["crc32"] = "%08x" % crc
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def tensors(header):
    return {k: v for k, v in header.items() if k != "__metadata__"}


def cut(header, data, name):
    """Removes name's bytes from the buffer and shifts the spans after it; returns the new buffer and its start."""
    s, e = header[name]["data_offsets"]
    for v in tensors(header).values():
        if v["data_offsets"][0] >= e:
            v["data_offsets"] = [x - (e - s) for x in v["data_offsets"]]
    return data[:s] + data[e:], s


def set_config(path, fields):
    h, d = read(path)
    config = json.loads(h["__metadata__"]["config"])
    config.update(fields)
    h["__metadata__"]["config"] = json.dumps(config)
    write(path, h, d)


def make_huge(path, name=None):
    h, d = read(path)
    name = name or next(k for k, v in sorted(tensors(h).items()) if len(v["shape"]) == 2)
    d, s = cut(h, d, name)
    h[name] = {"dtype": "F32", "shape": [BIG], "data_offsets": [s, s]}
    write(path, h, d)


def make_nan(path):
    h, d = read(path)
    d = bytearray(d)
    for v in tensors(h).values():
        if v["dtype"] == "F32":
            s, e = v["data_offsets"]
            d[s:e] = struct.pack("<f", float("nan")) * ((e - s) // 4)
    write(path, h, bytes(d))


def make_overlap(path, shift=0):
    h, d = read(path)
    size = {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in tensors(h).items()}
    largest = max(size, key=lambda k: (size[k], k))
    smallest = min((k for k in size if size[k] > 0), key=lambda k: (size[k], k))
    d, _ = cut(h, d, smallest)
    start = h[largest]["data_offsets"][0] + shift
    h[smallest]["data_offsets"] = [start, start + size[smallest]]
    write(path, h, d)


def add_entries(path, n):
    h, d = read(path)
    for i in range(n):
        h["zz%d" % i] = {"dtype": "F32", "shape": [0], "data_offsets": [len(d), len(d)]}
    write(path, h, d)


def truncate(path, n):
    b = open(path, "rb").read()
    open(path, "wb").write(b[:n])


# ---- seeds --------------------------------------------------------------------------------------

TEXT = "".join("%s %s the %s %s.\n" % (a, v, b, c)
               for a in ("the fox", "a dog", "my cat", "our owl")
               for v in ("jumps over", "sleeps near", "looks at")
               for b in ("lazy", "quick", "old")
               for c in ("dog", "fence", "moon"))
SMALL = ["--threads", "1", "--steps", "2", "--warmup", "1", "--eval-every", "0", "--d-model", "16", "--heads", "2",
         "--d-ff", "32", "--batch-size", "4", "--quiet", "--samples", "0"]


def train(bin_dir, work):
    """Trains the tiny checkpoints (and converts the translate one to one K/V head); returns {name: model file}."""
    text = os.path.join(work, "text.txt")
    open(text, "w").write(TEXT)
    runs = {
        "lm": ["lm", "train", "--text", text, "--context", "16", "--layers", "1"],
        "copy": ["copy_task", "train", "--enc-layers", "1", "--dec-layers", "1", "--max-len", "10", "--symbols", "5",
                 "--min-length", "2", "--max-length", "6", "--eval-size", "8"],
        "translate": ["translate", "train", "--enc-layers", "1", "--dec-layers", "1", "--eval-size", "8"],
    }
    files = {}
    for family, argv in runs.items():
        ck = os.path.join(work, family)
        subprocess.run([os.path.join(bin_dir, argv[0])] + argv[1:] + SMALL + ["--checkpoint-dir", ck], check=True,
                       stdout=subprocess.DEVNULL)
        files[family] = os.path.join(ck, "step-00000002.model.safetensors")
    files["translate-gqa"] = os.path.join(work, "gqa.model.safetensors")
    subprocess.run([os.path.join(bin_dir, "heads_study"), "--convert-gqa", files["translate"], "--kv-heads", "1", "--to",
                    files["translate-gqa"]], check=True, stdout=subprocess.DEVNULL)
    return files


def seeds(build_dir):
    corpus = os.path.join(ROOT, "fuzz", "corpus", "model")
    regressions = os.path.join(ROOT, "fuzz", "regressions", "model")
    for d in (corpus, regressions):
        os.makedirs(d, exist_ok=True)
    work = tempfile.mkdtemp(prefix="attograd_seeds_")
    try:
        files = train(os.path.join(build_dir, "bin"), work)

        def variant(directory, name, family, *edits):
            path = os.path.join(directory, name + ".model.safetensors")
            shutil.copyfile(files[family], path)
            for edit, *args in edits:
                edit(path, *args)
            print("%-60s %6d bytes" % (os.path.relpath(path, ROOT), os.path.getsize(path)))

        for family in files:
            variant(corpus, family, family)
        variant(corpus, "lm-d-model-16.5", "lm", (set_config, {"d_model": 16.5}))
        variant(corpus, "copy-nan-weights", "copy", (make_nan,))
        variant(corpus, "lm-duplicate-span", "lm", (make_overlap, 0))
        variant(corpus, "translate-overlapping-spans", "translate", (make_overlap, 4))
        variant(corpus, "copy-truncated", "copy", (truncate, 3000))
        variant(regressions, "b1-lm-d-ff-2p62", "lm", (set_config, {"d_ff": BIG}))
        variant(regressions, "b1-lm-vocab-2p62-d-model-1", "lm", (set_config, {"vocab": BIG, "d_model": 1, "heads": 1}))
        variant(regressions, "b1-copy-d-ff-2p62", "copy", (set_config, {"d_ff": BIG}))
        variant(regressions, "b1-translate-tgt-vocab-2p62-d-model-1", "translate",
                (set_config, {"tgt_vocab": BIG, "d_model": 1, "heads": 1}))
        variant(regressions, "b5-lm-layers-1e8", "lm", (set_config, {"layers": 10**8}))
        variant(regressions, "b2-translate-shape-2p62-no-bytes", "translate", (make_huge,))
        b2 = os.path.join(ROOT, "fuzz", "regressions", "safetensors", "b2-shape-2p62-f32-no-bytes.safetensors")
        write(b2, {"x": {"dtype": "F32", "shape": [BIG], "data_offsets": [0, 0]}}, b"")
        b9 = os.path.join(ROOT, "fuzz", "corpus", "safetensors", "b9-1000-entries.safetensors")
        write(b9, {}, b"")
        add_entries(b9, 1000)
        for path in (b2, b9):
            print("%-60s %6d bytes" % (os.path.relpath(path, ROOT), os.path.getsize(path)))
    finally:
        shutil.rmtree(work)


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    command, args = argv[1], argv[2:]
    if command == "config":
        set_config(args[0], {k: json.loads(v) for k, v in (a.split("=", 1) for a in args[1:])})
    elif command == "huge":
        make_huge(*args[:2])
    elif command == "nan":
        make_nan(args[0])
    elif command == "overlap":
        make_overlap(args[0], int(args[1]) if len(args) > 1 else 0)
    elif command == "entries":
        add_entries(args[0], int(args[1]))
    elif command == "truncate":
        truncate(args[0], int(args[1]))
    elif command == "train":
        os.makedirs(args[1], exist_ok=True)
        train(os.path.join(args[0], "bin"), args[1])
    elif command == "seeds":
        seeds(args[0])
    else:
        sys.exit("craft.py: unknown command %r\n%s" % (command, __doc__))


if __name__ == "__main__":
    main(sys.argv)
