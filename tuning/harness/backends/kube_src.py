"""SRC on a cluster: the user's code folder as a ConfigMap mounted read-only at /src, where
Compose binds it. A ConfigMap key holds no '/', so each file gets a key of its own and the
volume's `items` put it back at its path in the folder (kube_pod.volumes).

What travels is every file of the folder (or the one file SRC names) but version control's
folders and Python's bytecode (`.git`, `__pycache__`, `*.pyc`: what a cluster neither needs nor
should get), dotfiles (`.env`, `.netrc`, ...) and what names a secret (keys, certificates,
tokens, credentials: a ConfigMap is readable by anyone who can read the namespace); the render
says which it left out. A file a link names travels as the file. A ConfigMap is one API
object: with its keys and base64 it holds at most 1 MiB (Kubernetes' limit on an object in
etcd), so a larger folder is refused with the fix, before anything is written.
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

from tuning.harness.errors import HarnessError

LIMIT = 1_000_000  # bytes of keys and values: 1 MiB less room for the object's metadata
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__"}
SKIP_SUFFIXES = (".pyc", ".pyo")
_KEY_CHARS = re.compile(r"[^-._a-zA-Z0-9]")  # a ConfigMap key is [-._a-zA-Z0-9]+


# what names a secret: private keys, certificates' keys, keystores, tokens, credentials
SECRET = re.compile(
    r"(?i)(^id_(rsa|dsa|ecdsa|ed25519)|\.(pem|key|p12|pfx|jks|keystore|kdbx)$|secret|token(?!iz)"
    r"|credential|passw)"
)


def left_out(folder: str | Path) -> list[str]:
    """The paths in SRC that never travel: dotfiles and dot-folders, and what names a secret."""
    return [rel for rel, _, keep in _walk(folder) if not keep]


def files(folder: str | Path) -> list[tuple[str, Path]]:
    """(path in SRC, the file) for every file that travels, in a fixed order."""
    return [(rel, path) for rel, path, keep in _walk(folder) if keep]


def _walk(folder: str | Path):
    """(path in SRC, the file, whether it travels) of every file; SRC may be one file."""
    top = Path(folder)
    if top.is_file():
        yield top.name, top, not _secret(top.name)
        return
    for here, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(names):
            path = Path(here, name)
            if name.endswith(SKIP_SUFFIXES) or not path.is_file():
                continue
            rel = path.relative_to(top).as_posix()
            yield rel, path, not any(_secret(part) for part in rel.split("/"))


def _secret(name: str) -> bool:
    return name.startswith(".") or bool(SECRET.search(name))


def key(index: int, rel: str) -> str:
    """A key of its own for the file at `rel`: its index and its name, as a key allows."""
    return f"{index:03d}-{_KEY_CHARS.sub('_', rel.rsplit('/', 1)[-1])}"[:253]


def items(folder: str | Path) -> list[tuple[str, str]]:
    """(key, path in SRC) of every file: the volume's items."""
    return [(key(i, rel), rel) for i, (rel, _) in enumerate(files(folder))]


def data(folder: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """The ConfigMap's data (UTF-8 text) and binaryData (base64) of the folder's files;
    refused when the whole would not fit in one object."""
    found = files(folder)
    text, binary, size = {}, {}, 0
    for i, (rel, path) in enumerate(found):
        raw, k = path.read_bytes(), key(i, rel)
        try:
            text[k] = raw.decode("utf-8")
            size += len(k) + len(raw)
        except UnicodeDecodeError:
            binary[k] = base64.b64encode(raw).decode("ascii")
            size += len(k) + len(binary[k])
    if size > LIMIT:
        biggest = sorted(found, key=lambda f: f[1].stat().st_size, reverse=True)[:3]
        named = ", ".join(f"{rel} ({p.stat().st_size / 1e6:.1f} MB)" for rel, p in biggest)
        raise HarnessError(
            f"SRC={folder}: {len(found)} files come to {size / 1e6:.1f} MB in a ConfigMap, "
            f"over the 1 MiB one holds (largest: {named}); a cluster cannot mount this "
            "machine's folder. "
            "Bake the code into your image (FROM tuning-harness:latest, COPY it in), push it, "
            "and run IMAGE=<it> ENTRY=<the script's path in it> without SRC; or leave data "
            "and checkpoints out of SRC"
        )
    return text, binary
