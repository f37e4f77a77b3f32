"""`make soak`'s bad input, refused before anything is written (the soak itself, on the engine:
engine/faults/test_soak_docker.py)."""

from __future__ import annotations

import pytest

from support.harness import harness


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--duration", "1m"], "MTBF is not set"),
        (["--mtbf", "40steps"], "DURATION is not set"),
        (["--mtbf", "40steps", "--duration", "1m", "--kinds", "pause"], "pause not a soak's kind"),
        (["--mtbf", "40steps", "--duration", "1m", "--resume"], "RESUME=1 does not apply"),
        (["--mtbf", "1m", "--duration", "1m", "--layout", "host"], "a soak runs in containers"),
    ],
)
def test_a_bad_soak_is_refused_before_anything_is_written(tmp_path, args, said):
    out = harness("soak", *args, runs=tmp_path / "runs")
    assert out.returncode == 2, out.stdout + out.stderr
    assert said in out.stderr
    assert not (tmp_path / "runs").exists()
