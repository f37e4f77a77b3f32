"""Each rank's step and loss while a run trains: redrawn in place on a terminal, plain
lines (one per new step) elsewhere, such as CI logs."""

from __future__ import annotations

import sys

from .runs import steps


class Progress:
    def __init__(self, stream=sys.stdout, total_steps: int | None = None):
        self.stream = stream
        self.tty = stream.isatty()
        self.total = total_steps
        self.seen: dict[int, int] = {}
        self.drawn = 0

    def update(self, metrics: dict[int, list[dict]]) -> None:
        last = {r: steps(lines)[-1] for r, lines in sorted(metrics.items()) if steps(lines)}
        if self.tty:
            self._redraw(last)
            return
        for rank, s in last.items():
            if self.seen.get(rank) != s["step"]:
                self.seen[rank] = s["step"]
                print(self._line(rank, s), file=self.stream, flush=True)

    def _line(self, rank: int, s: dict) -> str:
        of = f"/{self.total}" if self.total else ""
        return (f"rank{rank} step {s['step']}{of} loss {s['loss']:.4f} "
                f"({s['step_s']:.2f} s/step, world {s['world_size']})")  # fmt: skip

    def _redraw(self, last: dict[int, dict]) -> None:
        if not last:
            return
        up = f"\x1b[{self.drawn}F" if self.drawn else ""
        lines = "".join(f"\x1b[2K{self._line(r, s)}\n" for r, s in last.items())
        self.stream.write(up + lines)
        self.stream.flush()
        self.drawn = len(last)
