#!/usr/bin/python3
"""Reference ids from Debian's python3-sentencepiece for tests/test_lm_tokenizer.cpp.

    /usr/bin/python3 tools/make_sentencepiece_fixtures.py

Trains a BPE and a unigram model on tests/fixtures/sentencepiece/train.txt (the
first lines of docs/autograd.md, copied) with the options attograd's
SentencePieceTokenizer::train uses (attograd/data/sentencepiece.cpp; keep them in step),
and writes <kind>.model and expected.json: for each probe text, the ids python
gives. The C++ test loads the same .model files and must give the same ids.
"""
import json
import os

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "sentencepiece")
VOCAB = 300
PROBES = [
    "The engine walks the graph backwards.",
    "  two spaces,\nthen a new line\n\nand a blank one",
    "gradcheck(f, {x}) -> report.ok",
    "unknown: \u00e9\u00e8 \u4e2d\u6587 and a tab\there",
    "",
]


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(ROOT, "docs", "autograd.md"), encoding="utf-8") as f:
        text = "".join(f.readlines()[:300])
    train = os.path.join(OUT, "train.txt")
    with open(train, "w", encoding="utf-8") as f:
        f.write(text)
    expected = {"vocab_size": VOCAB, "probes": PROBES}
    for kind in ("bpe", "unigram"):
        spm.SentencePieceTrainer.train(
            input=train, model_prefix=os.path.join(OUT, kind), model_type=kind, vocab_size=VOCAB,
            character_coverage=1.0, normalization_rule_name="identity", remove_extra_whitespaces=False,
            add_dummy_prefix=False, user_defined_symbols=["\n"], input_sentence_size=1000000,
            shuffle_input_sentence=True, hard_vocab_limit=True, num_threads=1, minloglevel=2)
        os.remove(os.path.join(OUT, kind + ".vocab"))
        sp = spm.SentencePieceProcessor(model_file=os.path.join(OUT, kind + ".model"))
        expected[kind] = [sp.encode(p) for p in PROBES]
        expected[kind + "_decoded"] = [sp.decode(ids) for ids in expected[kind]]
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, ROOT)}: bpe.model, unigram.model, expected.json, train.txt")


if __name__ == "__main__":
    main()
