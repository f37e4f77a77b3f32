"""The dependency locks (docker/requirements*.lock) and their exact pins."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.utils import canonicalize_name

from support.paths import ROOT

LOCK = ROOT / "docker/requirements.lock"
GPU_LOCK = ROOT / "docker/requirements-gpu.lock"
CU128_LOCK = ROOT / "docker/requirements-gpu-cu128.lock"
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(===?)(\S+)")


def pins(path: Path) -> dict[str, str]:
    """A lock's packages (canonical names) -> their pinned versions."""
    found = {}
    for line in path.read_text().splitlines():
        if m := PIN.match(line):
            found[canonicalize_name(m[1])] = m[3]
    return found
