"""benchmarks/soak_model.py's table: each row is the soak's own record (its model, as
soak/record.py wrote it, and its measured interval), durations one for all or one a row."""

from __future__ import annotations

import sys

import pytest

from support.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import soak_model  # noqa: E402


def soak(run_id: str, save_steps: int, ett: float, iv: list[float], inside: bool) -> dict:
    model = {"save_s": 0.11, "restart_s": 5.2, "mtbf_s": 180.0, "tau_s": save_steps * 0.24}
    model |= {"ett": 0.93, "ett_renewal": 0.94, "inside": inside}
    return {
        "run_id": run_id,
        "save_steps": save_steps,
        "ett": ett,
        "ett_interval": iv,
        "failures": [{}] * 7,
        "wall_s": 1680.0,
        "model": model,
    }


def test_a_row_is_the_soaks_own_record_with_its_half_width():
    r = soak_model.row("tau*", soak("m1", 26, 0.95, [0.91, 0.97], True))
    assert (r["predicted"], r["renewal"], r["measured"]) == (0.93, 0.94, 0.95)
    assert r["half_width"] == pytest.approx(0.03)
    assert (r["failures"], r["save_steps"], r["restart_s"]) == (7, 26, 5.2)
    md = soak_model.table([r, soak_model.row("4 tau*", soak("m2", 104, 0.8, [0.7, 0.9], False))])
    lines = md.splitlines()
    assert len(lines) == 4
    assert "| 3.0 | 7 | 28 min | yes |" in lines[2]
    assert "70.0-90.0 %" in lines[3] and "| 10.0 |" in lines[3] and lines[3].endswith("NO |")


def test_a_soak_without_a_model_is_tabled_as_such():
    rec = soak("m0", 6, 0.9, None, False) | {"model": None}
    r = soak_model.row("tau*/4", rec)
    assert r["half_width"] is None and r["predicted"] is None
    assert "n/a" in soak_model.table([r])


def test_durations_one_for_all_or_one_a_row():
    assert soak_model.durations_arg("10m") == ["10m"] * 3
    assert soak_model.durations_arg("16m, 28m,100m") == ["16m", "28m", "100m"]
    for bad in ("1m,2m", "1m,2m,3m,4m", "10x", "16m,,100m"):
        with pytest.raises(SystemExit, match="one DURATION, or 3"):
            soak_model.durations_arg(bad)
