"""The disk-full fault and what a rank's file-system failure says
(tuning/container/rank/fs_errors.py), without an engine: the sentences for ENOSPC and EROFS, and the
Compose file with /output on a volume (the engine matrix:
engine/faults/test_fault_kinds_docker.py)."""

from __future__ import annotations

import errno

import pytest

from tuning.container.rank import fs_errors
from tuning.harness.backends import compose
from tuning.harness.layout.layout import Layout
from tuning.harness.layout.mounts import Mounts
from tuning.harness.layout.own_output import OwnOutput
from tuning.harness.layout.topology import Topology
from tuning.harness.layout.trainer import Trainer


def _raised_from(inner: BaseException, outer: BaseException) -> BaseException:
    """`outer` raised while handling `inner`, as fms's sys.exit(203) in its except is."""
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 (implicit chaining, as fms raises it)
    except BaseException as e:
        return e


def test_enospc_is_named_with_its_path(tmp_path):
    e = OSError(errno.ENOSPC, "No space left on device", "/output/checkpoint-20/x.bin")
    why = fs_errors.explain(_raised_from(e, SystemExit(203)), str(tmp_path))
    assert why.startswith(
        "ENOSPC (errno 28, No space left on device) writing /output/checkpoint-20/x.bin: "
    )


def test_torch_write_failure_blames_the_disk_only_when_it_is_full(tmp_path):
    # torch.save's own words when a write fails under it; here the disk has room: not ENOSPC
    err = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 391552 vs 1")
    assert fs_errors.explain(err, str(tmp_path)) is None
    assert fs_errors.explain(ValueError("bad value"), str(tmp_path)) is None


def test_read_only_root_says_where_to_write(monkeypatch):
    monkeypatch.setenv("HARNESS_OUTPUT_DIR", "/output")
    e = OSError(errno.EROFS, "Read-only file system", "results.txt")
    why = fs_errors.explain(e, "/output")
    assert why.startswith(
        "EROFS (errno 30): the container's root file system is read-only, as "
        "a PyTorchJob pod's is (readOnlyRootFilesystem), and the trainer wrote "
        "results.txt (working directory "
    )
    assert why.endswith(
        "A trainer can write only under the output dir /output (checkpoints, "
        "results), or /tmp and /dev/shm (scratch, lost at the end; HOME is "
        "/tmp): write there, not in the working directory"
    )


@pytest.mark.parametrize("entry", [None, "tuning.sft_trainer"])
def test_output_volume_keeps_what_the_harness_follows_on_the_host(entry, tmp_path):
    layout = Layout(
        run_id="r",
        topology=Topology("per-rank"),
        mounts=Mounts(str(tmp_path)),
        trainer=Trainer(entry=entry),
    )
    out = compose.render(layout, output=OwnOutput(volume="harness-r-output"))
    assert out["volumes"] == {"output": {"external": True, "name": "harness-r-output"}}
    mounts = {v["target"]: v for v in out["services"]["rank1"]["volumes"]}
    assert mounts["/output"] == {"type": "volume", "source": "output", "target": "/output"}
    assert mounts["/output/metrics"]["source"] == str(tmp_path / "output" / "metrics")
    assert ("/output/training_logs.jsonl" in mounts) == bool(entry)  # fms's steps
