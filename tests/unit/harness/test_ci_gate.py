"""CI's gate on skips (tests/conftest.py, support/ci_gate.py): in CI a test skipped for want of
an engine, of root or of ../shared is a red run; a machine's declared limit (netem) is not. Run
as a real pytest session with the suite's conftest loaded, CI set as .ci/run sets it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support.paths import ROOT

SKIPS = {
    "root": 'pytest.skip("giving files to the ranks\' user needs root")',
    "shared": 'pytest.skip("../shared/kube/x.yaml is missing")',
    "netem": 'pytest.skip("delay: netem not supported by this kernel: Error")',
}


def session(tmp_path, skip: str, ci: str) -> subprocess.CompletedProcess:
    test = tmp_path / "test_one.py"
    test.write_text(f"import pytest\n\n\ndef test_it():\n    {SKIPS[skip]}\n")
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT / "tests")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(test),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("skip", ["root", "shared"])
def test_in_ci_a_skipped_test_is_red(tmp_path, skip):
    got = session(tmp_path, skip, "true")
    assert got.returncode == 1, got.stdout[-2000:]
    assert "1 test(s) skipped, each a red run here" in got.stdout
    assert session(tmp_path, skip, "").returncode == 0  # off CI: a skip, said


def test_a_machine_limit_is_no_red_run(tmp_path):
    got = session(tmp_path, "netem", "true")
    assert got.returncode == 0, got.stdout[-2000:]


def test_ci_sets_its_own_gates():
    assert "export CI=true" in (ROOT / ".ci/run").read_text()
