"""Checkpoints a restart must not resume from: found, and moved aside (renamed, never deleted).

A kill during a save leaves `checkpoint-N` with some of its files. transformers'
`get_last_checkpoint` (trainer_utils.py) takes the highest N, complete or not, so every restart
of the group would load it and die the same way (fms-hf-tuning issue #432: a PyTorchJob restart
that never comes back). Before a group starts, `sweep(output_dir, rank)` renames each incomplete
checkpoint `torn-<name>-<utc>`: no longer `checkpoint-N` (transformers' regex
`^checkpoint-(\\d+)$` and rotate_checkpoints' glob `checkpoint-*` both pass it by), so the
trainer resumes from the newest complete one and nothing of the torn one is lost.

The one rule for "complete" (the host's RESUME checks use it too): trainer_state.json, which
the Trainer writes last, weights in one of the shapes HF writes, and every file readable as
far as a cheap look tells: a safetensors file's header and its length, a torch file's zip
directory (torch.save's format; the directory is at the end, so a file cut short has none),
a DCP folder's `.metadata` read (torch.distributed.checkpoint's pickle of its storage entries,
through stand-ins: torch is never imported) and every shard it names at least as long as the
bytes it names there. A checkpoint whose files are all there but cut short (a disk filling, a
copy interrupted) would kill every restart with "PytorchStreamReader failed reading zip
archive". A staging dir (`tmp-checkpoint-N`, our trainer's atomic save) that is still there was
never finished.

Standalone on purpose (standard library only), like fsdp_gloo.py: our launcher and trainer
import it, and the harness mounts it beside the rank recorder into a user's image (fms), so a
trainer we cannot edit gets the same. `python torn.py OUTPUT_DIR` moves aside what it finds.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import struct
import sys
import time
import zipfile
from pathlib import Path

CHECKPOINT = re.compile(r"checkpoint-(\d+)")  # transformers' PREFIX_CHECKPOINT_DIR-<step>
STAGING = "tmp-"  # tmp-checkpoint-N: a checkpoint being written (tuning/container/sft_trainer.py)
TORN = "torn-"  # torn-checkpoint-N-<utc>: moved aside
# Weights in the shapes HF writes: full model, LoRA adapter, FSDP (sharded dir or file).
WEIGHTS = ("model*.safetensors", "adapter_model.*", "pytorch_model*")
WAIT_S = 120  # how long a rank other than 0 waits for rank 0 to move them


def checkpoints(output: Path) -> list[Path]:
    """output/checkpoint-N directories by N, as get_last_checkpoint orders them."""
    found = [
        p for p in Path(output).glob("checkpoint-*") if p.is_dir() and CHECKPOINT.fullmatch(p.name)
    ]
    return sorted(found, key=lambda p: int(p.name.rsplit("-", 1)[1]))


def missing(path: Path) -> str | None:
    """What a checkpoint lacks to be resumed from (None: complete)."""
    path = Path(path)
    if not (path / "trainer_state.json").is_file():
        return "no trainer_state.json"
    if not any(any(path.glob(g)) for g in WEIGHTS):
        return f"no weights ({', '.join(WEIGHTS)})"
    for f in sorted(path.rglob("*")):
        why = unreadable(f)
        if why:
            return f"{f.relative_to(path)} {why}"
    return None


def unreadable(f: Path) -> str | None:
    """Why a checkpoint file cannot be what it says it is, by a cheap look (None: fine)."""
    try:
        if f.suffix == ".safetensors":
            return _safetensors(f)
        if f.suffix in (".pt", ".pth", ".bin"):
            return _torch_zip(f)
        if f.is_dir() and ((f / ".metadata").exists() or any(f.glob("*.distcp"))):
            return _dcp(f)
    except OSError as e:
        return f"cannot be read ({e})"
    return None


def _safetensors(f: Path) -> str | None:
    """8 bytes of header length, the JSON header, then the tensors up to the last offset."""
    size = f.stat().st_size
    with open(f, "rb") as fh:
        raw = fh.read(8)
        n = struct.unpack("<Q", raw)[0] if len(raw) == 8 else None
        if n is None or n > size - 8:
            return f"is cut short: {size} bytes, no whole safetensors header"
        try:
            header = json.loads(fh.read(n))
        except ValueError:
            return "is cut short: its safetensors header is not whole JSON"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    want = 8 + n + max(ends, default=0)
    if size != want:
        return f"is cut short: {size} bytes where its safetensors header says {want}"
    return None


def _torch_zip(f: Path) -> str | None:
    """torch.save writes a zip; every member must lie inside the file."""
    size = f.stat().st_size
    try:
        with zipfile.ZipFile(f) as z:
            members = z.infolist()
    except zipfile.BadZipFile as e:
        return f"is cut short: {size} bytes, its zip directory unreadable ({e})"
    for m in members:
        if m.header_offset + m.compress_size > size:
            return f"is cut short: {m.filename} ends past its {size} bytes"
    return None


def _dcp(d: Path) -> str | None:
    """torch.distributed.checkpoint writes the shards, then `.metadata` last: the shards it
    names, each at least as long as its entries' offset + length (filesystem.py's
    _StorageInfo)."""
    meta = d / ".metadata"
    if not meta.is_file() or meta.stat().st_size == 0:
        return "has no .metadata (or an empty one): DCP writes it last, so the save never finished"
    try:
        entries = dcp_entries(meta)
    except NotDcp as e:
        return f"has a .metadata that is not DCP's: {e}"
    except Exception as e:  # a pickle cut short or garbage fails in any way, all of them "torn"
        return f"has a .metadata that cannot be read ({type(e).__name__}: {e})"
    need: dict[str, int] = {}
    for rel, offset, length in entries:
        need[rel] = max(need.get(rel, 0), offset + length)
    for rel, want in sorted(need.items()):
        shard = d / rel
        if not shard.is_file():
            return f"lacks {rel}, a shard its .metadata names"
        size = shard.stat().st_size
        if size < want:
            return f"has {rel} cut short: {size} bytes where its .metadata names {want}"
    return None


class NotDcp(ValueError):
    """A `.metadata` that loads, but not as torch's checkpoint Metadata."""


class _Inert:
    """What a `.metadata` names of torch's (Metadata, _StorageInfo, torch.Size, a dtype...):
    its pickled state kept as attributes; no torch code runs, none is imported."""

    stands_for = ""  # module.name of the torch object

    def __init__(self, *args):  # torch.Size((3, 4)), an Enum's value: called by REDUCE
        self.args = args

    def __setstate__(self, state):  # BUILD: a dataclass's __dict__, or __getstate__'s tuple
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.state = state


class _MetadataUnpickler(pickle.Unpickler):
    """Loads torch's and pathlib's names (StorageMeta.checkpoint_id may be a PosixPath) as
    _Inert stand-ins and refuses any other: os.system, builtins.eval, what a hostile pickle
    would call."""

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.kinds: dict[str, type] = {}

    def find_class(self, module: str, name: str):
        if (module, name) == ("builtins", "getattr"):
            return _member  # an Enum member by name (Python 3.11.2's and 3.12's pickles)
        if module.split(".")[0] not in ("torch", "pathlib"):
            raise NotDcp(f"it loads {module}.{name}, not torch's checkpoint types")
        key = f"{module}.{name}"
        return self.kinds.setdefault(key, type(name, (_Inert,), {"stands_for": key}))


def _member(owner, name: str) -> _Inert:
    """getattr(_MEM_FORMAT_ENCODING, 'TORCH_CONTIGUOUS_FORMAT'), on a stand-in class only."""
    if not (isinstance(owner, type) and issubclass(owner, _Inert) and isinstance(name, str)):
        raise NotDcp(f"it calls getattr on {type(owner).__name__}, not on torch's types")
    return owner(name)


METADATA = "torch.distributed.checkpoint.metadata.Metadata"


def dcp_entries(meta: Path) -> list[tuple[str, int, int]]:
    """(relative_path, offset, length) of every storage entry a DCP `.metadata` holds
    (Metadata.storage_data's _StorageInfo); NotDcp when it is not torch's Metadata."""
    md = _MetadataUnpickler(meta.read_bytes()).load()
    held = getattr(type(md), "stands_for", None) or type(md).__name__
    if held != METADATA:
        raise NotDcp(f"it holds a {held}, not {METADATA}")
    storage = getattr(md, "storage_data", None)
    if not isinstance(storage, dict):
        raise NotDcp(f"its storage_data is a {type(storage).__name__}, not a dict")
    out = []
    for info in storage.values():
        entry = tuple(getattr(info, k, None) for k in ("relative_path", "offset", "length"))
        rel, offset, length = entry
        whole = isinstance(rel, str) and rel and isinstance(offset, int) and offset >= 0
        if not (whole and isinstance(length, int) and length >= 0):
            raise NotDcp(f"a storage entry is not (relative_path, offset, length): {entry}")
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise NotDcp(f"a storage entry names {rel}, outside its folder")
        out.append(entry)
    return out


def incomplete(output: Path) -> list[tuple[Path, str]]:
    """Every checkpoint a start must not meet: (path, why), by name."""
    out = [(p, why) for p in checkpoints(output) if (why := missing(p))]
    staged = [p for p in Path(output).glob(STAGING + "checkpoint-*") if p.is_dir()]
    out += [(p, "its staging dir: a save that never finished") for p in staged]
    return sorted(out)


def move_aside(output: Path, say=print) -> list[dict]:
    """Rename every incomplete checkpoint in `output`; return what moved where, and why."""
    moved = []
    utc = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for path, why in incomplete(output):
        name = f"{TORN}{path.name}-{utc}"
        n = 1
        while path.with_name(name).exists():  # the same checkpoint torn twice in one second
            n += 1
            name = f"{TORN}{path.name}-{utc}-{n}"
        try:
            path.rename(path.with_name(name))
        except FileNotFoundError:
            continue  # another process moved it first
        say(f"harness-torn: {path} is incomplete ({why}): moved aside to {name}", flush=True)
        moved.append({"checkpoint": path.name, "moved_to": name, "why": why})
    return moved


def moved(output: Path) -> list[str]:
    """The names of what was moved aside in `output` (any start, any process), by name."""
    return sorted(p.name for p in Path(output).glob(TORN + "*") if p.is_dir())


def sweep(output: str | os.PathLike, rank: int, wait_s: float = WAIT_S) -> list[dict]:
    """Before a start: rank 0 moves the torn checkpoints aside; another rank waits (bounded)
    until none is left, so that it resumes from the same checkpoint as rank 0."""
    output = Path(output)
    if not output.is_dir():
        return []
    if rank == 0:
        return move_aside(output)
    deadline = time.monotonic() + wait_s
    while incomplete(output) and time.monotonic() < deadline:
        time.sleep(0.2)
    return []


def before_start(output: str | os.PathLike, rank: int) -> list[dict]:
    """`sweep`, never failing the start over it: an output dir the process cannot rename in
    is said and left as it is (the trainer then fails on it with its own error)."""
    try:
        return sweep(output, rank)
    except OSError as e:
        print(f"harness-torn: cannot move torn checkpoints aside in {output}: {e}", flush=True)
        return []


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python torn.py OUTPUT_DIR", file=sys.stderr)
        return 2
    if not Path(argv[0]).is_dir():
        print(f"torn: {argv[0]} is not a directory", file=sys.stderr)
        return 2
    move_aside(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
