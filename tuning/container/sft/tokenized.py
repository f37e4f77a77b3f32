"""Tokenized records, kept compact and, with several ranks on a node, tokenized once.

Compact: a dataset's token ids and labels are two flat int32 arrays with an offset per record:
8 bytes a token, where Python lists took about 50 (an int object and two pointers; measured
4.8 KB a 73-token record before, docs/benchmarks.md), and a rank maps them rather than copies.

Once per node: fms tokenizes in its main process first and lets the other ranks read datasets'
cache (fms-hf-tuning tuning/data/setup_dataprocessor.py, ``main_process_first``). Here each of a
node's ranks tokenizes its own slice of the records (1/LOCAL_WORLD_SIZE of the work, so none
waits on one), writes it under the output dir, and every rank maps all slices (numpy.memmap):
the node's page cache holds one copy however many ranks read it. The files are removed as soon
as every rank has mapped them (a mapping outlives its file). Ranks agree through one all_reduce
on whether every slice was written; a rank whose slice failed raises its own error, the others
say which rank failed, so none waits for the collective timeout.
"""

from __future__ import annotations

import bisect
import os
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from tuning.container.sft.chat import IGNORE_INDEX
from tuning.container.sft.files import DataError

MAGIC = b"TOKENS01"
HEADER = 32  # MAGIC, records, tokens, learnable: four 8-byte fields


class Part(NamedTuple):
    """Records [offsets[i], offsets[i+1]) of ids and labels, each with its dataset index."""

    offsets: np.ndarray  # int64, records + 1
    index: np.ndarray  # int64, records
    ids: np.ndarray  # int32, tokens
    labels: np.ndarray  # int32, tokens
    learnable: bool  # some record has a label to learn after its first token


class TokenizedDataset:
    """A map-style dataset over Parts: dataset[i] is {"input_ids", "labels", "index"}."""

    def __init__(self, parts: list[Part]):
        self.parts = parts
        self.starts = [0]
        for part in parts:
            self.starts.append(self.starts[-1] + len(part.index))
        self.learnable = any(part.learnable for part in parts)

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, i: int) -> dict:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"record {i} of {len(self)}")
        k = bisect.bisect_right(self.starts, i) - 1
        part, j = self.parts[k], i - self.starts[k]
        a, b = part.offsets[j], part.offsets[j + 1]
        return {
            "input_ids": part.ids[a:b].tolist(),
            "labels": part.labels[a:b].tolist(),
            "index": int(part.index[j]),
        }

    @property
    def rows(self) -> list[dict]:
        return [self[i] for i in range(len(self))]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for p in self.parts for a in (p.offsets, p.index, p.ids, p.labels))


def pack(examples, tokenize: Callable) -> Part:
    """tokenize(example) -> {"input_ids", "labels", "index"} for each, packed as they come."""
    ids, labels, offsets, index = array("i"), array("i"), array("q", [0]), array("q")
    learnable = False
    for example in examples:
        row = tokenize(example)
        try:
            ids.extend(row["input_ids"])
            labels.extend(row["labels"])
        except OverflowError:
            raise DataError(
                f"{example.where}: a token id does not fit in 32 bits; no tokenizer's vocabulary"
                " is that large: check the record's input_ids and labels"
            ) from None
        offsets.append(len(ids))
        index.append(row["index"])
        learnable = learnable or any(x != IGNORE_INDEX for x in row["labels"][1:])
    arrays = (
        np.frombuffer(a, dtype=t) if len(a) else np.zeros(0, t)
        for a, t in ((offsets, np.int64), (index, np.int64), (ids, np.int32), (labels, np.int32))
    )
    return Part(*arrays, learnable)


def write_part(part: Part, path: Path) -> None:
    """One file: a header, then offsets, index, ids, labels (each 8-byte aligned)."""
    tmp = path.with_name(path.name + ".tmp")
    counts = np.array([len(part.index), len(part.ids), int(part.learnable)], dtype=np.int64)
    with open(tmp, "wb") as fh:
        fh.write(MAGIC)
        for a in (counts, part.offsets, part.index, part.ids, part.labels):
            data = memoryview(np.ascontiguousarray(a)).cast("B")
            fh.write(data)
            fh.write(b"\0" * (-len(data) % 8))
    os.replace(tmp, path)


def read_part(path: Path) -> Part:
    """A written Part, mapped: its pages are the node's page cache, shared by every rank."""
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    if bytes(buf[:8]) != MAGIC:
        raise OSError(f"{path}: not a tokenized part")
    n, tokens, learnable = buf[8:HEADER].view(np.int64)
    at, out = HEADER, []
    for count, dtype in ((n + 1, np.int64), (n, np.int64), (tokens, np.int32), (tokens, np.int32)):
        size = int(count) * np.dtype(dtype).itemsize
        out.append(buf[at : at + size].view(dtype))
        at += size + (-size % 8)
    return Part(*out, bool(learnable))


@dataclass(frozen=True)
class Node:
    """This rank's place among its node's ranks, and where they leave their slices."""

    local_rank: int
    local_world: int
    folder: Path
    tag: str  # node and restart attempt: files of another node or attempt never mix in

    @classmethod
    def from_env(cls, output_dir: str) -> Node | None:
        """None where a rank has no peers on its node (one process, a rank per node)."""
        import torch.distributed as dist

        local_world = int(os.environ.get("LOCAL_WORLD_SIZE") or 1)
        if local_world < 2 or not dist.is_initialized():
            return None
        tag = (
            f"node{os.environ.get('GROUP_RANK', '0')}"
            f"-try{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        )
        folder = Path(output_dir) / ".harness"
        return cls(int(os.environ.get("LOCAL_RANK") or 0), local_world, folder, tag)

    def path(self, name: str, local_rank: int) -> Path:
        return self.folder / f"tokens-{name}-{self.tag}-part{local_rank}.bin"

    def slice(self, n: int) -> slice:
        return slice(
            n * self.local_rank // self.local_world, n * (self.local_rank + 1) // self.local_world
        )


def _agree(failed: int) -> tuple[int, int]:
    """Every rank's (worst failure, the first rank with it): 0 ok, 1 refused data, 2 else."""
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    flags = torch.tensor([failed, -rank if failed else -dist.get_world_size()], dtype=torch.long)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)  # a CPU tensor: gloo, on GPU runs as well
    return int(flags[0]), -int(flags[1])


def _step(step: Callable, name: str):
    """step() on every rank, then agreement: the failing rank raises its own error, the others
    name it; none is left waiting in a collective."""
    try:
        result, failed, error = step(), 0, None
    except DataError as exc:
        result, failed, error = None, 1, exc
    except Exception as exc:
        result, failed, error = None, 2, exc
    worst, who = _agree(failed)
    if error is not None:
        raise error
    if worst == 1:
        raise DataError(f"rank {who} refused the {name} data as it tokenized it (its log says why)")
    if worst:
        raise RuntimeError(f"rank {who} failed to tokenize the {name} data (its log says why)")
    return result


def build(examples: list, tokenize: Callable, node: Node | None, name: str) -> TokenizedDataset:
    """The examples tokenized: here, all of them (node None), or this rank's slice, written,
    and every slice of the node mapped."""
    if node is None:
        return TokenizedDataset([pack(examples, tokenize)])

    def write():
        node.folder.mkdir(parents=True, exist_ok=True)
        write_part(pack(examples[node.slice(len(examples))], tokenize), mine)

    mine = node.path(name, node.local_rank)
    _step(write, name)
    parts = _step(lambda: [read_part(node.path(name, k)) for k in range(node.local_world)], name)
    mine.unlink()  # every rank of the node has mapped it
    return TokenizedDataset(parts)
