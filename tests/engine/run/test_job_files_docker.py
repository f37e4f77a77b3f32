"""A Hugging Face cache snapshot as MODEL (issue 38), on the engine: `make up` trains it, bound
from the folder its links point into (the job files and paths without an engine:
unit/harness/test_job_files.py)."""

from __future__ import annotations

import json

import pytest

from support.harness import make
from support.hf_cache import hf_snapshot


@pytest.mark.docker
def test_a_hugging_face_cache_snapshot_trains(tmp_path, tiny_model, harness_image):
    snapshot = hf_snapshot(tiny_model, tmp_path / "cache")
    runs = tmp_path / "runs"
    out = make(
        "up", "GPUS=0", "STEPS=3", "RUN_ID=hfcache", f"MODEL={snapshot}", silent=True, runs=runs
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((runs / "hfcache" / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["steps"] == 3, summary
    assert f"bound from {snapshot.parents[1]}" in summary["model"]
