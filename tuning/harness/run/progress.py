"""Each rank's step and loss while a run trains: redrawn in place on a terminal, plain
lines (one per new step) elsewhere, such as CI logs."""

from __future__ import annotations

import sys

from tuning.harness.rundirs.runs import steps


class Progress:
    def __init__(self, stream=sys.stdout, total_steps: int | None = None):
        self.stream = stream
        self.tty = stream.isatty()
        self.total = total_steps
        self.seen: dict[int, int] = {}
        self.drawn = 0

    def update(self, metrics: dict[int, list[dict]]) -> None:
        done = {r: steps(lines) for r, lines in sorted(metrics.items())}
        if self.tty:
            self._redraw({r: s[-1] for r, s in done.items() if s})
            return
        for rank, rank_steps in done.items():
            for s in rank_steps:
                if s["step"] > self.seen.get(rank, 0):
                    self.seen[rank] = s["step"]
                    print(self._line(rank, s), file=self.stream, flush=True)

    def _line(self, rank: int, s: dict) -> str:
        of = f"/{self.total}" if self.total else ""
        pace = f"{s['step_s']:.2f} s/step" if s.get("step_s") is not None else "first logged"
        return (f"rank{rank} step {s['step']}{of} loss {s['loss']:.4f} "
                f"({pace}, world {s['world_size']})")  # fmt: skip

    def _redraw(self, last: dict[int, dict]) -> None:
        if not last:
            return
        up = f"\x1b[{self.drawn}F" if self.drawn else ""
        lines = "".join(f"\x1b[2K{self._line(r, s)}\n" for r, s in last.items())
        self.stream.write(up + lines)
        self.stream.flush()
        self.drawn = len(last)
