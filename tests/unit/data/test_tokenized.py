"""Tokenized data kept compact and tokenized once per node (tuning/container/sft/tokenized.py): the
same rows as tokenize_example gives, 8 bytes a token, each rank of a node tokenizing its slice and
mapping the others', and a failure on one rank ending every rank with the reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.entries.tokens_entry import Ex, N, tokenize_as
from support.paths import ENTRIES, ROOT
from tuning.container.demo_data import records
from tuning.container.sft.data import load_examples, tokenize_example, tokenize_examples
from tuning.container.sft.files import DataError
from tuning.container.sft.tokenized import (
    Node,
    TokenizedDataset,
    build,
    pack,
    read_part,
    write_part,
)


def _expected() -> list[dict]:
    return [tokenize_as(0, "ok", [])(Ex(i, "")) for i in range(N)]


def test_rows_are_tokenize_examples_own(tmp_path, tokenizer):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records(40, seed=2)))
    examples = load_examples(path)
    ds = tokenize_examples(examples, tokenizer, 24)
    rows = [tokenize_example(e, tokenizer, 24) for e in examples]
    assert ds.rows == rows and [ds[i] for i in (-1, -40)] == [rows[-1], rows[0]]
    with pytest.raises(IndexError):
        ds[40]
    tokens = sum(len(r["input_ids"]) for r in rows)
    assert ds.nbytes == 8 * tokens + 16 * len(rows) + 8  # int32 ids and labels, int64 offsets


def test_parts_written_and_mapped_read_back_the_same(tmp_path):
    rows = _expected()
    for n in range(N + 1):  # odd token counts too: each array starts 8-byte aligned
        part = pack([Ex(i, "") for i in range(n)], lambda e: rows[e.index])
        write_part(part, tmp_path / f"p{n}")
        back = read_part(tmp_path / f"p{n}")
        assert TokenizedDataset([back]).rows == TokenizedDataset([part]).rows == rows[:n]
        assert back.learnable == part.learnable == (n > 1)


def test_nothing_to_learn_and_ids_too_large_are_refused():
    masked = {"input_ids": [1, 2], "labels": [-100, -100], "index": 0}
    assert not pack([Ex(0, "")], lambda e: masked).learnable
    huge = {"input_ids": [1, 2**31], "labels": [1, 2], "index": 0}
    with pytest.raises(DataError, match=r"d.jsonl:3: a token id does not fit in 32 bits"):
        pack([Ex(0, "d.jsonl:3")], lambda e: huge)


@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_node_slices_cover_every_record_once(world):
    for n in range(0, 20):
        covered = []
        for rank in range(world):
            covered += range(n)[Node(rank, world, Path("."), "t").slice(n)]
        assert covered == list(range(n))


def _two_ranks(tmp_path: Path, mode: str) -> tuple[dict, dict]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        str(ENTRIES / "tokens_entry.py"),
        str(tmp_path),
        mode,
    ]
    out = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return tuple(json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))


def test_two_ranks_of_a_node_tokenize_once_between_them(tmp_path):
    zero, one = _two_ranks(tmp_path, "ok")
    assert zero["node"] and one["node"]
    assert zero["seen"] == list(range(N // 2)) and one["seen"] == list(range(N // 2, N))
    assert zero["rows"] == one["rows"] == _expected() and zero["parts"] == 2
    assert zero["learnable"] and one["learnable"]
    assert not list((tmp_path / ".harness").iterdir()), "slice files left behind"
    assert (
        build([Ex(i, "") for i in range(N)], tokenize_as(0, "ok", []), None, "t").rows
        == (zero["rows"])
    )


@pytest.mark.parametrize(
    "mode, theirs, mine",
    [
        (
            "refuse",
            "DataError: d.jsonl:6: refused here",
            "DataError: rank 1 refused the training data as it tokenized it (its log says why)",
        ),
        (
            "crash",
            "RuntimeError: broken here",
            "RuntimeError: rank 1 failed to tokenize the training data (its log says why)",
        ),
    ],
)
def test_a_rank_that_fails_ends_both_with_its_reason(tmp_path, mode, theirs, mine):
    zero, one = _two_ranks(tmp_path, mode)  # returns: neither waits on the other for ever
    assert one["error"] == theirs and zero["error"] == mine
