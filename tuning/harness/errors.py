"""The bottom of the host side: what every layer may raise, and where the repository is."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class HarnessError(RuntimeError):
    """A failure the user can act on; the message says what and how."""


class NodeLost(RuntimeError):
    """A node the harness watches is gone or cannot be asked: its container was removed
    from outside, or the engine stopped answering. The run ends `failed` with this reason."""
