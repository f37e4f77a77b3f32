"""A model laid out as huggingface_hub's cache lays out a download."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path


def hf_snapshot(model: Path, cache: Path) -> Path:
    """`model` laid out as huggingface_hub's cache lays out a download: each file a blob named
    by its hash, and the snapshot's files relative links to ../../blobs/<hash>."""
    repo = cache / "hub" / "models--acme--tiny"
    sha = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / sha
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    for f in model.iterdir():
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copy(f, repo / "blobs" / digest)
        (repo / "blobs" / digest).chmod(0o644)
        (snapshot / f.name).symlink_to(f"../../blobs/{digest}")
    return snapshot
