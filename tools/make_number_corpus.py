#!/usr/bin/python3
"""Write the number-words parallel corpus under data/numbers/ (English -> French, German, Spanish).

    /usr/bin/python3 tools/make_number_corpus.py            # writes data/numbers/*.tsv
    /usr/bin/python3 tools/make_number_corpus.py --out DIR --seed 7

Each split is one TSV file with a header line and the columns
    number  en  fr  de  es
built with Debian's python3-num2words. The English commas ("one thousand,
one hundred") are dropped; everything else is num2words' output unchanged.

Splits (disjoint by number, integers in [0, 999,999]):
  train.tsv  50,000   valid.tsv  2,000   test.tsv  2,000
  gen.tsv    2,000    numbers >= 100,000 whose thousands group (n // 1000) is
                      one of HELDOUT_GROUPS values that never occur as a
                      thousands group in train, valid or test: the model has
                      seen "one hundred and seventy-one" as a last group, never
                      "one hundred and seventy-one thousand", so gen probes
                      composition rather than memory.
The main splits hold every number below 1,000, then numbers drawn from
[1,000, 9,999], [10,000, 99,999] and [100,000, 999,999] in fixed proportions,
so short numbers are not swamped by six-digit ones.
"""
import argparse
import os
import random

from num2words import num2words

SEED = 20261129
SIZES = {"train": 50_000, "valid": 2_000, "test": 2_000}
GEN_SIZE = 2_000
HELDOUT_GROUPS = 60                      # thousands-group values (100..999) kept out of the main splits
BAND_SHARE = [(1_000, 9_999, 0.12), (10_000, 99_999, 0.28), (100_000, 999_999, 0.60)]
LANGS = ["en", "fr", "de", "es"]


def words(n, lang):
    text = num2words(n, lang=lang)
    if lang == "en":
        text = text.replace(",", "")
    assert "\t" not in text and "\n" not in text and text, (n, lang, text)
    return text


def sample_main(rng, total, heldout):
    """Every number below 1,000 plus banded draws, excluding the held-out thousands groups."""
    chosen = set(range(1_000))
    rest = total - len(chosen)
    for lo, hi, share in BAND_SHARE:
        want = round(rest * share) if (lo, hi, share) != BAND_SHARE[-1] else total - len(chosen)
        band = set()
        while len(band) < want:
            n = rng.randint(lo, hi)
            if n not in chosen and n // 1000 not in heldout:
                band.add(n)
        chosen |= band
    numbers = sorted(chosen)
    rng.shuffle(numbers)
    return numbers


def write(path, numbers):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("#number\t" + "\t".join(LANGS) + "\n")
        for n in numbers:
            f.write(str(n) + "\t" + "\t".join(words(n, lang) for lang in LANGS) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "numbers"))
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    heldout = set(rng.sample(range(100, 1_000), HELDOUT_GROUPS))
    numbers = sample_main(rng, sum(SIZES.values()), heldout)
    splits, start = {}, 0
    for name, size in SIZES.items():
        splits[name] = numbers[start:start + size]
        start += size
    gen_pool = [n for g in sorted(heldout) for n in range(g * 1000, g * 1000 + 1000)]
    splits["gen"] = rng.sample(gen_pool, GEN_SIZE)

    train_groups = {n // 1000 for n in splits["train"] if n >= 1000}
    assert not train_groups & {n // 1000 for n in splits["gen"]}
    seen = set()
    for name, nums in splits.items():
        assert not seen & set(nums), name
        seen |= set(nums)

    os.makedirs(args.out, exist_ok=True)
    for name, nums in splits.items():
        write(os.path.join(args.out, name + ".tsv"), nums)
        print(f"{name}: {len(nums)} numbers -> {os.path.join(args.out, name + '.tsv')}")


if __name__ == "__main__":
    main()
