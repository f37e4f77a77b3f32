"""A deterministic, learnable demo data set.

``python -m tuning.container.demo_data --out FILE [--n N] [--seed S] [--words W]``

Each record maps a few words to their fixed partners (animal -> colour, position by position),
in the input/output shape. A tiny model's loss falls clearly within 50 steps. ``corpus()`` gives
the text the tiny tokenizer is trained on, from the same generator, so every token is in vocab.

``--words W`` gives every record exactly W words instead of 3-6: long records for throughput
checks. With the tiny tokenizer each word is one token, so a record is 2W + 9 tokens with EOS;
W = seq_len / 2 fills a ``max_seq_length`` of seq_len exactly (no padding; the response loses
its last few tokens to truncation, the prompt stays whole).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SOURCE = ["cat", "dog", "fox", "owl", "bee", "elk", "ant", "yak", "emu", "cod", "eel", "hen"]
TARGET = [
    "red",
    "blue",
    "green",
    "gold",
    "pink",
    "gray",
    "teal",
    "navy",
    "lime",
    "rust",
    "plum",
    "jade",
]
MAPPING = dict(zip(SOURCE, TARGET, strict=True))
PROMPT = "### Input: {words}\n\n## Label:"
RESPONSE_TEMPLATE = "## Label:"
FORMATTER_TEMPLATE = "### Input: {{input}}\n\n## Label: {{output}}"


def records(n: int = 512, seed: int = 0, words: int | None = None) -> list[dict]:
    if words is not None and words < 1:
        raise ValueError("words must be >= 1")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        count = rng.randint(3, 6) if words is None else words
        chosen = [rng.choice(SOURCE) for _ in range(count)]
        out.append(
            {
                "input": PROMPT.format(words=" ".join(chosen)),
                "output": " " + " ".join(MAPPING[w] for w in chosen),
            }
        )
    return out


def corpus() -> list[str]:
    """Tokenizer training text: the prompt shapes and every word, many times over."""
    lines = [r["input"] + r["output"] for r in records(256, seed=12345)]
    lines += [FORMATTER_TEMPLATE, "### Input:", "## Label:", " ".join(SOURCE), " ".join(TARGET)]
    return lines


def write(out: str | Path, n: int = 512, seed: int = 0, words: int | None = None) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as fh:
        for record in records(n, seed, words):
            fh.write(json.dumps(record) + "\n")
    return out


def cli(argv: list[str] | None, module: str, doc: str, options: dict[str, dict], run) -> int:
    """The command line of this module and of tuning.container.tiny_model: ``python -m MODULE`` with
    `options` (flag -> add_argument keywords, in order); run(args) writes the files and returns
    the line to print."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.splitlines()[0])
    for flag, kwargs in options.items():
        parser.add_argument(flag, **kwargs)
    print(run(parser.parse_args(argv)))
    return 0


def main(argv: list[str] | None = None) -> int:
    options = {
        "--out": dict(required=True, help="JSONL file to write"),
        "--n": dict(type=int, default=512, help="number of records (default 512)"),
        "--seed": dict(type=int, default=0),
        "--words": dict(type=int, default=None, help="exactly W words per record (default: 3-6)"),
    }

    def run(a):
        return f"wrote {a.n} records to {write(a.out, a.n, a.seed, a.words)}"

    return cli(argv, "tuning.container.demo_data", __doc__, options, run)


if __name__ == "__main__":
    raise SystemExit(main())
