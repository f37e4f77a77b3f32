"""`make up`'s progress: redrawn in place on a terminal (a real pseudo-terminal here), one plain
line per new step elsewhere (CI logs)."""

from __future__ import annotations

import io
import os

from tuning.harness.run.progress import Progress


def step(rank: int, n: int, loss: float, step_s: float | None = 0.5) -> dict:
    return {"event": "step", "rank": rank, "step": n, "loss": loss, "step_s": step_s,
            "world_size": 2}  # fmt: skip


def test_a_terminal_gets_the_lines_redrawn_in_place():
    master, slave = os.openpty()
    with open(slave, "w") as tty:
        p = Progress(stream=tty, total_steps=30)
        assert p.tty
        p.update({0: [step(0, 1, 5.0, None)], 1: [step(1, 1, 5.1, None)]})
        p.update({0: [step(0, 1, 5.0), step(0, 2, 4.5)], 1: [step(1, 1, 5.1), step(1, 2, 4.6)]})
    shown = os.read(master, 4096).decode().replace("\r\n", "\n")
    os.close(master)
    assert shown == (
        "\x1b[2Krank0 step 1/30 loss 5.0000 (first logged, world 2)\n"
        "\x1b[2Krank1 step 1/30 loss 5.1000 (first logged, world 2)\n"
        "\x1b[2F"  # up two lines: the same two lines are drawn over
        "\x1b[2Krank0 step 2/30 loss 4.5000 (0.50 s/step, world 2)\n"
        "\x1b[2Krank1 step 2/30 loss 4.6000 (0.50 s/step, world 2)\n"
    )


def test_a_log_gets_one_plain_line_per_new_step():
    out = io.StringIO()
    p = Progress(stream=out)
    p.update({0: [step(0, 1, 5.0)]})
    p.update({0: [step(0, 1, 5.0), step(0, 2, 4.5)]})
    assert out.getvalue() == (
        "rank0 step 1 loss 5.0000 (0.50 s/step, world 2)\n"
        "rank0 step 2 loss 4.5000 (0.50 s/step, world 2)\n"
    )
