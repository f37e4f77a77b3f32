"""Two ranks of one node tokenizing together (tuning/container/sft/tokenized.py), run under
torchrun: each writes what it saw to OUT/rank<N>.json. MODE: ok; refuse (rank 1's tokenizing refuses
its data); crash (rank 1's raises an ordinary error)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NamedTuple

import torch.distributed as dist

from tuning.container.sft.files import DataError
from tuning.container.sft.tokenized import Node, build

N = 11


class Ex(NamedTuple):
    index: int
    where: str


def tokenize_as(rank: int, mode: str, seen: list):
    def tokenize(example: Ex) -> dict:
        seen.append(example.index)
        if rank == 1 and mode == "refuse":
            raise DataError(f"{example.where}: refused here")
        if rank == 1 and mode == "crash":
            raise RuntimeError("broken here")
        ids = [example.index * 10 + k for k in range(example.index % 4 + 1)]
        return {"input_ids": ids, "labels": [-100, *ids[1:]], "index": example.index}

    return tokenize


def main(out: str, mode: str) -> None:
    dist.init_process_group("gloo")
    rank, seen = dist.get_rank(), []
    node = Node.from_env(out)
    result = {"rank": rank, "node": node is not None}
    try:
        ds = build(
            [Ex(i, f"d.jsonl:{i + 1}") for i in range(N)],
            tokenize_as(rank, mode, seen),
            node,
            "training",
        )
        result.update(rows=ds.rows, learnable=ds.learnable, parts=len(ds.parts))
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    result["seen"] = seen
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
