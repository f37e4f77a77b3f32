"""Each rank's step and loss while a run trains: redrawn in place on a terminal; elsewhere
(CI logs) a plain line every `EVERY` steps per rank, plus each rank's last step when the run
ends (`finish`); nothing at all when quiet (bench off a terminal prints one line per run)."""

from __future__ import annotations

import sys

from tuning.harness.run_files.metric_lines import steps

EVERY = 10


class Progress:
    def __init__(
        self,
        stream=sys.stdout,
        total_steps: int | None = None,
        every: int = EVERY,
        quiet: bool = False,
    ):
        self.stream = stream
        self.tty = stream.isatty()
        self.total = total_steps
        self.every = every
        self.quiet = quiet
        self.seen: dict[int, int] = {}  # rank -> the last step printed
        self.last: dict[int, dict] = {}  # rank -> its last step line seen
        self.drawn = 0

    def update(self, metrics: dict[int, list[dict]]) -> None:
        done = {r: steps(lines) for r, lines in sorted(metrics.items())}
        if self.tty:
            self._redraw({r: s[-1] for r, s in done.items() if s})
            return
        for rank, rank_steps in done.items():
            for s in rank_steps:
                if s["step"] > self.seen.get(rank, 0):
                    self.last[rank] = s
                    if s["step"] % self.every == 0 or s["step"] == self.total:
                        self._print(rank, s)

    def finish(self, metrics: dict[int, list[dict]]) -> None:
        """The run ended: off a terminal, each rank's last step if it was not printed yet."""
        self.update(metrics)
        for rank, s in sorted(self.last.items()):
            if not self.tty and s["step"] > self.seen.get(rank, 0):
                self._print(rank, s)

    def _print(self, rank: int, s: dict) -> None:
        self.seen[rank] = s["step"]
        if not self.quiet:
            print(self._line(rank, s), file=self.stream, flush=True)

    def _line(self, rank: int, s: dict) -> str:
        of = f"/{self.total}" if self.total else ""
        pace = f"{s['step_s']:.2f} s/step" if s.get("step_s") is not None else "first logged"
        loss = f"{s['loss']:.4f}" if s.get("loss") is not None else "-"  # a step not logged
        return f"rank{rank} step {s['step']}{of} loss {loss} ({pace}, world {s['world_size']})"

    def _redraw(self, last: dict[int, dict]) -> None:
        if not last:
            return
        up = f"\x1b[{self.drawn}F" if self.drawn else ""
        lines = "".join(f"\x1b[2K{self._line(r, s)}\n" for r, s in last.items())
        self.stream.write(up + lines)
        self.stream.flush()
        self.drawn = len(last)
