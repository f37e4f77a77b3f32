"""The rank recorder (tuning/rank_record.py, mounted as harness_rank) around a foreign trainer
that returns with its process group still open, as fms 3.2.2 does: real torch, a real gloo
group of one. Left to interpreter exit, gloo can abort the rank after its training completed
(SIGABRT, seen once in CI with fms's torch 2.8); the recorder destroys the group first, after a
trainer that returned 0 only (on a failure its peers may still be inside a collective)."""

from __future__ import annotations

import pytest
from conftest import free_port, read_metrics, recorder

TRAINER = """import atexit, os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(4))
# runs at interpreter exit, after the recorder returned: is the group still there?
atexit.register(lambda: print("initialized at exit:", dist.is_initialized(), flush=True))
if os.environ.get("FAIL"):
    sys.exit(3)
"""


@pytest.mark.parametrize("fail, closed", [("", True), ("1", False)])
def test_a_group_left_open_is_destroyed_after_a_trainer_that_returned_0(
    mounted, tmp_path, fail, closed
):
    _, env = mounted
    (tmp_path / "user/foreign_trainer.py").write_text(TRAINER)
    env = {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "FAIL": fail}
    proc = recorder(env, "cpu")
    assert proc.returncode == (3 if fail else 0), proc.stderr[-3000:]
    assert f"initialized at exit: {not closed}" in proc.stdout, proc.stdout
    end = read_metrics(tmp_path / "out", 0)[-1]
    assert end["event"] == "end" and end["closed_group"] is closed
    assert end["status"] == ("failed" if fail else "completed")


def test_no_group_no_close(mounted, tmp_path):
    """A trainer that never joined a group (one process): nothing to destroy, nothing said."""
    marker, env = mounted
    assert recorder(env, "cpu").returncode == 0 and marker.exists()
    assert read_metrics(tmp_path / "out", 0)[-1]["closed_group"] is False
