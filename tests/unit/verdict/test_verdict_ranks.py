"""The verdict over real gloo ranks (tests/support/entries/desync_entry.py under torchrun and the
rank recorder) that something outside stops or slows: a rank stopped for good (SIGSTOP, as a frozen
node) and a rank stopped and continued (a throttle, as `make fault FAULT=slow` does in one
container)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

from support.desync_ranks import Ranks
from tuning.harness.stacks import dumps
from tuning.harness.verdict import facts, rules

LOOP = {"DESYNC_ENTRY_ITERS": "100000"}


def _pid(r: Ranks, rank: int) -> int:
    r.wait_for(lambda: (r.out / f"stacks/rank{rank}.pid.json").exists(), "pid file")
    return json.loads((r.out / f"stacks/rank{rank}.pid.json").read_text())["pid"]


def _stepping(r: Ranks) -> bool:
    """Every rank has printed its third step. The ranks share one log and their prints can
    land on one line ("rank 0 step 3desync_entry: rank 3 step 3"), so the step's number ends
    where the digits do, not at a word boundary."""
    return len(set(re.findall(r"rank (\d) step 3(?!\d)", r.log.read_text()))) == 4


def test_a_stopped_rank_is_named_frozen_and_where_the_others_wait(ranks):  # noqa: F811
    r = ranks(4, **LOOP)
    r.wait_for(lambda: _stepping(r), "steps")
    os.kill(_pid(r, 2), signal.SIGSTOP)
    try:
        v, taken = r.judged(
            lambda t: all("waiting in all" in t["ranks"][x]["summary"] for x in (0, 1, 3))
        )
    finally:
        os.kill(_pid(r, 2), signal.SIGCONT)
    assert taken["ranks"][2]["state"] == "stopped (SIGSTOP: it cannot dump)"
    assert (v.kind, v.culprits) == ("stopped or frozen", [2]), v
    assert v.evidence.startswith(
        "rank 2 is stopped (SIGSTOP: it cannot run or dump); ranks 0, 1 and 3 wait in all_"
    ), v.evidence


def test_a_throttled_rank_is_named_slow_by_when_it_reaches_each_collective(ranks):  # noqa: F811
    r = ranks(4, **LOOP)
    r.wait_for(lambda: _stepping(r), "steps")
    pid, stop = _pid(r, 1), threading.Event()

    def throttle():  # runs it 5 % of each 0.2 s, as fault slow's STOP/CONT cycle does
        while not stop.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.19)
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.01)

    thread = threading.Thread(target=throttle, daemon=True)
    thread.start()
    try:
        time.sleep(4)  # the recorder's last 16 collectives all came after the throttle
        taken = dumps.dump(r.out, [dumps.Node("host", list(range(4)))], "test")
    finally:
        stop.set()
        thread.join()
        os.kill(pid, signal.SIGCONT)
    assert taken["ranks"][1]["state"] == "dumped", taken["summaries"]  # never called frozen
    v = rules.judge(facts.gather(4, r.metrics(), taken, progressing=True))
    assert (v.kind, v.culprits) == ("slow", [1]), v
    assert v.evidence.startswith(
        "rank 1 reaches the collectives late: the others waited for it alone a mean "
    )
    late = v.waited_s
    assert late["1"] > 0.02 and all(late[x] < late["1"] / 5 for x in ("0", "2", "3")), late
