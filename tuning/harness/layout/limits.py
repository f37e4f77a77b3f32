"""What a layout's containers may use, and how often the harness restarts its ranks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    memory: str | None = None  # per container (Compose mem_limit, e.g. "8g"); None: no limit
    pids: int | None = None  # processes per container (Compose pids_limit); None: no limit
    max_restarts: int = 0  # MAX_RESTARTS: group restarts, each from the newest checkpoint
