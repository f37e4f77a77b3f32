"""The disk-full fault on the engine: disk-full for our trainer and fms in both layouts, fms's
save-kill resuming from its newest complete checkpoint, and a foreign ENTRY that writes to its
working directory (support/entries/entry_writes_cwd.py) meeting the read-only root and told
where it can write (what a rank's file-system failure says: unit/faults/test_fault_kinds.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from safetensors import safe_open

from support.engine import leftovers
from support.harness import harness
from support.paths import ENTRIES
from tuning.container.rank import torn
from tuning.harness.faults.kinds import disk_full
from tuning.harness.run_files import metric_lines

TIMEOUT = 15


# --- on the engine ------------------------------------------------------------------------
CASES = [(t, lay) for t in ("harness", "fms") for lay in ("single", "per-rank")]


@pytest.mark.parametrize("trainer,layout", CASES)
@pytest.mark.docker
@pytest.mark.fault
@pytest.mark.slow
def test_disk_full(trainer, layout, harness_image, tmp_path):
    if trainer == "fms":
        built = harness("image", "--trainer", "fms", runs=tmp_path, timeout=1200)
        assert built.returncode == 0, built.stdout + built.stderr
    runs = tmp_path / "fault"
    out = harness(
        "fault",
        "--fault",
        "disk-full",
        "--layout",
        layout,
        "--trainer",
        trainer,
        "--timeout",
        str(TIMEOUT),
        runs=runs,
        timeout=400,
    )
    run_dir = (runs / "latest").resolve()
    rec = json.loads((run_dir / "fault.json").read_text())
    assert "Traceback" not in out.stderr, out.stderr
    assert rec["outcome"] == "failed fast" and rec["goal_met"] is True, out.stdout + out.stderr
    assert rec["leftovers"] == [] and leftovers(rec["run_id"]) == []
    assert leftovers(f"{rec['run_id']}-keep") == []  # the volume and its keeper too
    disk = rec["disk"]
    assert disk["free_after"] < disk["checkpoint_bytes"]  # less room than a checkpoint
    hit = disk["enospc"][0]
    assert hit["errno"] == 28 and hit["path"].startswith("/output/")
    assert "checkpoint-" in hit["path"]
    # Earlier checkpoints are whole and in the run dir (copied out of the volume): loadable
    output = run_dir / "output"
    assert disk["complete"] and not (output / disk_full.FILLER).exists()
    for name in disk["complete"]:
        assert torn.missing(output / name) is None
        with safe_open(output / name / "model.safetensors", "pt") as f:
            assert list(f.keys())
    # The failed save is torn: a start never resumes from it (torn.py moves it aside)
    assert len(disk["torn"]) == 1 and disk["torn"][0] not in disk["complete"]
    assert [p.name for p, _ in torn.incomplete(output)] == disk["torn"]
    md = (run_dir / "fault.md").read_text().splitlines()
    assert f"- on a cluster: {disk_full.CLUSTER}" in md
    assert any(x.startswith(f"- disk: rank {hit['rank']}: ENOSPC (errno 28) writing ") for x in md)
    assert Path(run_dir / "output" / "metrics").is_dir()


WRITES_CWD_IMAGE = "harness-test-writes-cwd:latest"  # the harness's image + tests/entry_writes_cwd


@pytest.mark.docker
@pytest.mark.slow
def test_a_trainer_writing_its_working_directory_is_told_where_it_can_write(
    harness_image, tmp_path
):
    ctx = tmp_path / "image"
    ctx.mkdir()
    shutil.copy(ENTRIES / "entry_writes_cwd.py", ctx)
    (ctx / "Dockerfile").write_text(
        f"FROM {harness_image}\nCOPY entry_writes_cwd.py /opt/harness/entry_writes_cwd.py\n"
    )
    built = subprocess.run(
        ["docker", "build", "-q", "-t", WRITES_CWD_IMAGE, str(ctx)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    out = harness(
        "up",
        "--image",
        WRITES_CWD_IMAGE,
        "--entry",
        "entry_writes_cwd",
        "--layout",
        "single",
        "--gpus",
        "0",
        runs=tmp_path / "runs",
        timeout=300,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    run_dir = (tmp_path / "runs" / "latest").resolve()
    assert leftovers(run_dir.name) == []
    metrics = metric_lines.read_metrics(run_dir / "output")
    ends = {r: x for r, lines in metrics.items() for x in lines if x.get("event") == "end"}
    # The first rank to fail makes torchrun stop the other, which on a loaded machine may still
    # be importing (seen: rank 0 at its imports 4.5 s after rank 1 failed): it ends by SIGTERM
    assert sorted(metrics) == [0, 1] and ends, metrics
    log = (run_dir / "logs" / "trainer.log").read_text()
    for r in set(metrics) - set(ends):
        stopped = rf"rank\s+: {r} \(local_rank: \d+\)\n\s+exitcode\s+: -15"
        assert re.search(stopped, log), log[-3000:]
    for end in ends.values():  # each rank's end says why, and where it may write
        assert end["status"] == "failed" and end["error"].startswith(
            "EROFS (errno 30): the container's root file system is read-only, as a PyTorchJob "
            "pod's is (readOnlyRootFilesystem), and the trainer wrote results.txt (working "
            "directory /opt/harness). A trainer can write only under the output dir /output "
            "(checkpoints, results), or /tmp and /dev/shm (scratch, lost at the end; HOME is "
            "/tmp): write there, not in the working directory (OSError: [Errno 30] Read-only "
            "file system: 'results.txt')"
        ), end["error"]
    assert "harness_rank: EROFS (errno 30): the container's root file system is read-only" in log


@pytest.mark.docker
@pytest.mark.fault
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["single", "per-rank"])
def test_fms_save_kill_resumes_from_the_newest_complete_checkpoint(layout, harness_image, tmp_path):
    """save-kill for TRAINER=fms: the rank recorder holds every HF Trainer save after the
    weights (HARNESS_SAVE_SLEEP), the kill lands inside checkpoint-20, the restart
    (MAX_RESTARTS=1: torchrun's in single, the harness's in per-rank) moves it aside and fms
    resumes from checkpoint-10; the losses after it are an unfaulted fms run's."""
    built = harness("image", "--trainer", "fms", runs=tmp_path, timeout=1200)
    assert built.returncode == 0, built.stdout + built.stderr
    common = ("--trainer", "fms", "--layout", layout, "--steps", "30")
    out = harness(
        "fault",
        "--fault",
        "save-kill",
        *common,
        "--max-restarts",
        "1",
        "--timeout",
        str(TIMEOUT),
        runs=tmp_path / "fault",
        timeout=500,
    )
    run_dir = (tmp_path / "fault" / "latest").resolve()
    rec = json.loads((run_dir / "fault.json").read_text())
    assert rec["outcome"] == "recovered" and rec["goal_met"] is True, out.stdout + out.stderr
    save = rec["save"]
    assert (save["checkpoint"], save["step"]) == ("checkpoint-20", 20), save
    names = {Path(f).name for f in save["files"]}
    assert "model.safetensors" in names and not names & {"trainer_state.json", "optimizer.pt"}
    (moved,) = save["moved_aside"]
    assert moved.startswith("torn-checkpoint-20-") and save["resumed_from_step"] == 10
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["torn_checkpoints"] == [moved] and leftovers(rec["run_id"]) == []
    plain = harness("up", *common, runs=tmp_path / "plain", timeout=500)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    want = dict(json.loads((tmp_path / "plain" / "latest" / "summary.json").read_text())["losses"])
    after = {s: loss for s, loss in summary["losses"] if s > 10}
    assert sorted(after) == list(range(11, 31))
    assert all(abs(loss - want[s]) < 1e-5 for s, loss in after.items()), (after, want)
