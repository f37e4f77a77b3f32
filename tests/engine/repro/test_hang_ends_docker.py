"""A hang ends (issue 53): a user's HF Trainer script whose callback all-reduces on rank 0
alone (tests/user_bugs/hf_callback_allreduce.py, `--ddp_timeout` in ARGS) hangs for good on
gloo: transformers drops ddp_timeout on CPU ranks, so each process group gets torch's 1800 s,
and gloo then leaves the collective waiting. `make up` names the culprit at its first look and
ends the run itself once every rank is stuck 30 s past the job's own timeout: failed, "hung
past its timeout", the stacks and the verdict kept, nothing left. In both layouts."""

from __future__ import annotations

import json

import pytest

from support.engine import leftovers
from support.harness import make

TIMEOUT = 10  # the job's own collective timeout (ARGS' --ddp_timeout)
ARGS = (
    "--output_dir /output --max_steps 30 --per_device_train_batch_size 4 "
    f"--ddp_timeout {TIMEOUT} --logging_steps 1 --report_to none --save_strategy no"
)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["single", "per-rank"])
def test_a_users_hang_is_named_then_ended_past_its_own_timeout(layout, harness_image, tmp_path):
    run_id = f"hang-{layout}"
    said = make(
        "up",
        "SRC=tests/user_bugs",
        "ENTRY=hf_callback_allreduce.py",
        f"ARGS={ARGS}",
        "GPUS=0",
        "NPROC=3",
        f"LAYOUT={layout}",
        f"RUN_ID={run_id}",
        runs=tmp_path,
        timeout=600,
    )
    summary = json.loads((tmp_path / run_id / "summary.json").read_text())
    assert said.returncode != 0 and summary["status"] == "failed", said.stdout[-3000:]
    assert summary["reason"].startswith(f"hung past its timeout ({TIMEOUT} s"), summary["reason"]
    v = summary["verdict"]
    assert (v["class"], v["culprits"]) == ("desync", [0]), v
    assert "hf_callback_allreduce.py:34" in v["evidence"]  # the callback's all_reduce
    hang = summary["hang"]
    assert hang["timeout_s"] == TIMEOUT and hang["quiet_s"] >= TIMEOUT
    assert "the ranks' process group got 1800 s" in hang["timeout_from"]
    stall = summary["stall"]
    assert stall["verdict"]["culprits"] == [0] and stall["verdict_after_s"] <= hang["quiet_s"]
    assert list((tmp_path / run_id / "output/stacks").iterdir())
    assert "the harness ends the run and keeps the stacks" in said.stdout
    assert leftovers(run_id, tmp_path) == []
