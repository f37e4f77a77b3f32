"""`make up`'s progress: redrawn in place on a terminal (a real pseudo-terminal here); elsewhere
(CI logs) every tenth step and each rank's last; nothing when quiet (bench off a terminal)."""

from __future__ import annotations

import io
import os

from tuning.harness.run.progress import Progress


def step(rank: int, n: int, loss: float, step_s: float | None = 0.5) -> dict:
    return {
        "event": "step",
        "rank": rank,
        "step": n,
        "loss": loss,
        "step_s": step_s,
        "world_size": 2,
    }


def read_all(master: int) -> bytes:
    """Everything the closed terminal's side wrote. One read returns what the pty has passed
    on so far, which under load can be the first update alone; the master reads EIO once the
    slave is closed and all of it was read."""
    out = b""
    try:
        while chunk := os.read(master, 4096):
            out += chunk
    except OSError:  # EIO: the other side is closed and nothing is left
        pass
    os.close(master)
    return out


def test_a_terminal_gets_the_lines_redrawn_in_place():
    master, slave = os.openpty()
    with open(slave, "w") as tty:
        p = Progress(stream=tty, total_steps=30)
        assert p.tty
        p.update({0: [step(0, 1, 5.0, None)], 1: [step(1, 1, 5.1, None)]})
        p.update({0: [step(0, 1, 5.0), step(0, 2, 4.5)], 1: [step(1, 1, 5.1), step(1, 2, 4.6)]})
    shown = read_all(master).decode().replace("\r\n", "\n")
    assert shown == (
        "\x1b[2Krank0 step 1/30 loss 5.0000 (first logged, world 2)\n"
        "\x1b[2Krank1 step 1/30 loss 5.1000 (first logged, world 2)\n"
        "\x1b[2F"  # up two lines: the same two lines are drawn over
        "\x1b[2Krank0 step 2/30 loss 4.5000 (0.50 s/step, world 2)\n"
        "\x1b[2Krank1 step 2/30 loss 4.6000 (0.50 s/step, world 2)\n"
    )


def test_a_log_gets_every_tenth_step_and_the_last():
    out = io.StringIO()
    p = Progress(stream=out, total_steps=25)
    lines = [step(0, n, 5.0 - n / 10) for n in range(1, 24)]
    p.update({0: lines[:12]})  # steps 1..12: step 10 printed
    p.update({0: lines})  # ..23: step 20
    p.finish({0: lines})  # the run ended at 23 (of 25): its last step too
    assert out.getvalue() == (
        "rank0 step 10/25 loss 4.0000 (0.50 s/step, world 2)\n"
        "rank0 step 20/25 loss 3.0000 (0.50 s/step, world 2)\n"
        "rank0 step 23/25 loss 2.7000 (0.50 s/step, world 2)\n"
    )


def test_the_total_step_is_printed_once_and_quiet_prints_nothing():
    out = io.StringIO()
    p = Progress(stream=out, total_steps=12)
    lines = [step(1, n, 1.0) for n in range(1, 13)]
    p.update({1: lines})
    p.finish({1: lines})
    assert out.getvalue() == (
        "rank1 step 10/12 loss 1.0000 (0.50 s/step, world 2)\n"
        "rank1 step 12/12 loss 1.0000 (0.50 s/step, world 2)\n"
    )
    quiet = io.StringIO()
    q = Progress(stream=quiet, total_steps=12, quiet=True)
    q.update({1: lines})
    q.finish({1: lines})
    assert quiet.getvalue() == ""
