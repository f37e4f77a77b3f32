"""A stalled `make up` says its verdict: our trainer's rank 0 works alone before a collective
(HARNESS_DESYNC=slow-main, as a tokenization on the main process does) while ranks 1-3 wait
in it. LAYOUT=host: the ranks are this machine's processes (they inherit the harness's
environment, which is how the fault reaches them here); the container path differs only in
where the dump's shell runs (tests/test_stacks_docker.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from conftest import PYTHON, ROOT


def test_a_stalled_up_names_the_rank_the_others_wait_for(tmp_path):
    env = {**os.environ, "HARNESS_DESYNC": "slow-main", "HARNESS_DESYNC_RANK": "0",
           "HARNESS_DESYNC_AT": "100", "HARNESS_DESYNC_S": "600"}  # fmt: skip
    argv = [PYTHON, "-m", "tuning.harness", "up", "--layout", "host", "--nproc", "4", "--steps",
            "40", "--stall", "15", "--timeout", "600", "--run-id", "stalled", "--runs",
            str(tmp_path)]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    seen, deadline = [], time.monotonic() + 300
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("harness:   torch's fr_trace") or time.monotonic() > deadline:
                break
        verdict = next((x for x in seen if x.startswith("harness: verdict")), "")
        assert verdict.startswith(
            "harness: verdict (the harness's reading): never arrived, culprit rank(s): 0: rank 0 "
            "never entered "
        ), "".join(seen)
        assert ", where ranks 1, 2 and 3 wait; rank 0 is in main_process_work at " in verdict
        assert verdict.rstrip().endswith(f"called from {ROOT / 'tuning/sft_trainer.py'}:"
                                          f"{_train_line()}")  # fmt: skip
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the harness stops the ranks and records
        out, _ = proc.communicate(timeout=180)
    summary = json.loads((tmp_path / "stalled/summary.json").read_text())
    assert summary["status"] == "interrupted", out
    assert summary["verdict"]["culprits"] == [0] and summary["verdict"]["class"] == "never arrived"
    assert summary["stall"]["verdict"] == summary["verdict"]
    torch_said = summary["verdict"]["fr_trace"]
    assert torch_said["ran"] and torch_said["flagged"]["missing"] == [0], torch_said
    assert torch_said["agrees"] is True


def _train_line() -> int:
    """The line of sft_trainer.py whose collective rank 0 was about to call: trainer.train."""
    lines = (ROOT / "tuning/sft_trainer.py").read_text().splitlines()
    return next(i for i, x in enumerate(lines, 1) if "trainer.train(resume_from_checkpoint" in x)
