"""Checkpoint folders built by hand, each file whole in its format (stdlib only, as
tuning/container/rank/torn.py is), and files cut short as a kill inside a save leaves them."""

from __future__ import annotations

import json
import re
import struct
import zipfile
from pathlib import Path

# the name a torn checkpoint is moved aside to (tuning/container/rank/torn.py): never deleted
TORN_NAME = re.compile(r"torn-(tmp-)?checkpoint-\d+-\d{8}T\d{6}Z")


def safetensors(path: Path, tensors: int = 2) -> None:
    """A whole safetensors file, written by its spec (8-byte header length, JSON, data)."""
    header = {
        f"w{i}": {"dtype": "F32", "shape": [2], "data_offsets": [8 * i, 8 * i + 8]}
        for i in range(tensors)
    }
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(8 * tensors))


def torch_zip(path: Path) -> None:
    """A zip as torch.save writes one (archive/data.pkl, archive/data/0)."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/data/0", bytes(4096))


def tree(root: Path, ckpts: dict[str, list[str]]) -> Path:
    """Checkpoint folders with the named files, each whole in its format (text otherwise)."""
    for name, files in ckpts.items():
        (root / name).mkdir(parents=True)
        for f in files:
            path = root / name / f
            if f.endswith(".safetensors"):
                safetensors(path)
            elif f.endswith((".pt", ".pth", ".bin")):
                torch_zip(path)
            else:
                path.write_text(f)
    return root


def cut(path: Path, keep: float = 0.5) -> None:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])
