"""A user's own HF training script in the containers (issue 28, part 4), unmodified, from
`make fault` with SRC, ENTRY and ARGS: tests/user_scripts/train_sft.py (HfArgumentParser,
Trainer, save_steps; it resumes by itself from the newest checkpoint in its output dir) runs
in the harness's own image, its folder bound read-only.

Two runs, 2 CPU ranks, 30 steps each:
- per-rank, save-kill at AT_STEP=12 with MAX_RESTARTS=1: the kill lands inside the save of
  checkpoint-20 (the rank recorder holds HF Trainer saves), the harness restarts both
  containers, the torn checkpoint-20 is set aside, and the script resumes from checkpoint-10.
- single, kill at AT_STEP=12: the fault lands on rank 1's own steps (the recorder's step
  lines), and the group fails fast.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.engine import leftovers
from support.harness import YAML_12_WORDS
from support.paths import ROOT, USER_SCRIPTS
from tuning.harness.backends import compose, engine
from tuning.harness.layout.layout import Layout
from tuning.harness.layout.mounts import Mounts
from tuning.harness.layout.topology import Topology
from tuning.harness.layout.trainer import Trainer
from tuning.harness.run_files import metric_lines

ARGS = (
    "--model_name_or_path /opt/harness/assets/tiny-model --train_file "
    "/opt/harness/assets/demo.jsonl --output_dir /output --max_steps 30 --save_steps 10 "
    "--logging_steps 1 --per_device_train_batch_size 4 --learning_rate 3e-3 --ddp_timeout 30 "
    "--report_to none --seed 7"
)
AT_STEP = 12


def own_fault(kind: str, layout: str, runs: Path, *extra: str) -> tuple[dict, dict, dict]:
    """(fault.json, summary.json, each rank's metric lines) of `make fault` on the script."""
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "fault",
            f"FAULT={kind}",
            f"LAYOUT={layout}",
            "GPUS=0",
            "NPROC=2",
            f"AT_STEP={AT_STEP}",
            "SRC=tests/user_scripts",
            "ENTRY=train_sft.py",
            f"ARGS={ARGS}",
            f"RUNS={runs}",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = out.stdout + out.stderr
    assert out.returncode == 0 and "Traceback" not in said, f"exit {out.returncode}:\n{said}"
    record = json.loads((runs / "latest/fault.json").read_text())
    summary = json.loads((runs / "latest/summary.json").read_text())
    metrics = metric_lines.read_metrics(runs / "latest/output")
    assert record["leftovers"] == [] and leftovers(record["run_id"]) == [], said
    assert record["trainer"] == {
        "image": "tuning-harness:latest",
        "entry": "/src/train_sft.py",
        "src": str(USER_SCRIPTS),
        "args": ARGS.split(),
    }, said
    assert "harness: ENTRY /src/train_sft.py from " in out.stdout, said
    md = (runs / "latest/fault.md").read_text()
    assert "- trainer: `/src/train_sft.py` in `tuning-harness:latest` from `" in md
    assert f"; ARGS `{ARGS}`; ARGS is ENTRY's whole command line" in md
    return record, summary, metrics


def _trained(metrics: dict, rank: int) -> list[dict]:
    """The rank's "training" phase lines: one per start of its Trainer."""
    return [x for x in metrics[rank] if x.get("name") == "training"]


@pytest.mark.docker
def test_compose_reads_every_word_of_args_as_the_string_typed(tmp_path):
    """YAML 1.2 takes a bare 3e-3 for a number; the rendered file quotes it (compose.dump)."""
    layout = Layout(
        topology=Topology("per-rank"),
        mounts=Mounts(str(tmp_path), src=str(USER_SCRIPTS)),
        trainer=Trainer(entry="/src/train_sft.py", args=YAML_12_WORDS),
    )
    path = tmp_path / "compose.yaml"
    path.write_text(compose.dump(compose.render(layout)))
    out = subprocess.run(
        [*engine.compose_cmd(), "-f", str(path), "config", "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    for svc in json.loads(out.stdout)["services"].values():
        assert svc["command"] == list(YAML_12_WORDS) and svc["working_dir"] == "/src"


@pytest.mark.docker
@pytest.mark.fault
@pytest.mark.slow
def test_save_kill_per_rank_sets_the_torn_checkpoint_aside_and_the_script_resumes(tmp_path):
    rec, summary, metrics = own_fault("save-kill", "per-rank", tmp_path, "MAX_RESTARTS=1")
    said = json.dumps(rec, indent=1)
    assert rec["status"] == "done" and rec["injected_step"] >= AT_STEP, said
    assert "docker kill (SIGKILL)" in rec["how"] and "checkpoint-20" in rec["how"], said
    save = rec["save"]
    assert save["checkpoint"] == "checkpoint-20" and "trainer_state.json" not in save["files"]
    (aside,) = save["moved_aside"]
    assert aside.startswith("torn-checkpoint-20-") and summary["torn_checkpoints"] == [aside]
    assert save["resumed_from_step"] == 10
    # the script's own resume: each rank's second start began after checkpoint-10
    for rank in (0, 1):
        first, again = _trained(metrics, rank)
        assert (first["step"], again["step"], again["max_steps"]) == (0, 10, 30)
    assert rec["outcome"] == "recovered" and len(rec["restarts"]) == 1, said
    assert rec["steps"] == rec["steps_reached"] == 30 and rec["goal_met"] is True, said
    assert summary["status"] == "succeeded" and summary["steps"] == 30
    assert [r["world_size_seen"] for r in summary["ranks"]] == [2, 2]
    complete = [c["name"] for c in rec["checkpoints"] if c["complete"]]
    assert complete == ["checkpoint-10", "checkpoint-20", "checkpoint-30"], rec["checkpoints"]


@pytest.mark.docker
@pytest.mark.fault
@pytest.mark.slow
def test_kill_single_lands_on_rank_ones_own_steps(tmp_path):
    rec, _, metrics = own_fault("kill", "single", tmp_path)
    said = json.dumps(rec, indent=1)
    assert rec["status"] == "done" and rec["outcome"] == "failed fast", said
    assert "steps_note" not in rec and rec["step_sleep_s"] == 0.2  # paced, every rank's own
    # the step it landed at is rank 1's own, as its metrics show it
    rank1_steps = [x["step"] for x in metric_lines.steps(metrics[1])]
    assert rec["injected_step"] >= AT_STEP and rec["injected_step"] in rank1_steps, said
    ranks = {x["rank"]: x for x in rec["ranks"]}
    assert ranks[1]["signal"] == 9 and ranks[1]["signature"] == "SIGKILL", said
    assert ranks[1]["last_step"] >= AT_STEP and ranks[1]["last_step"] < 30, said
    assert ranks[0]["exit_code"] not in (None, 0), said  # the survivor failed, it did not hang
    assert rec["steps"] == 30  # the Trainer's own max_steps, as it logged it
