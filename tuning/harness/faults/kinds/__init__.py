"""The table of fault kinds, read from this package: every module here but kind.py and
tools.py declares `KINDS`, a tuple of `kind.Kind` (one kind, or a family such as netem's delay
and loss). Adding a kind is a module here and its section in docs/faults.md
(tests/unit/faults/test_fault_table.py holds both); `make fault FAULT=?` lists TABLE's names.
"""

from __future__ import annotations

import importlib
import pkgutil

from tuning.harness.faults.kinds.kind import Kind

HELPERS = ("kind", "tools")  # modules of this package that declare no kind


def _read() -> dict[str, Kind]:
    kinds: list[Kind] = []
    for found in pkgutil.iter_modules(__path__):
        if found.name in HELPERS:
            continue
        module = importlib.import_module(f"{__name__}.{found.name}")
        declared = getattr(module, "KINDS", None)
        if not declared or not all(isinstance(k, Kind) for k in declared):
            raise TypeError(f"{module.__name__} declares no KINDS (a tuple of fault kinds)")
        kinds += declared
    for what in ("name", "order", "pool_place"):
        seen = [getattr(k, what) for k in kinds if getattr(k, what) is not None]
        twice = sorted({str(x) for x in seen if seen.count(x) > 1})
        if twice:
            raise TypeError(f"fault kinds share a {what}: {', '.join(twice)}")
    return {k.name: k for k in sorted(kinds, key=lambda k: k.order)}


TABLE = _read()
NAMES = tuple(TABLE)
KNOBS = tuple(knob for kind in TABLE.values() for knob in kind.knobs)  # LATE, ...
