"""`make down`, `make ps` and every run act on this checkout's runs only (its RUNS folder), unless
ALL=1 (issue 28, part 5), without an engine: what `make down` passes, which folders a RUNS
folder holds, and the RUNS folder on everything Compose makes (live runs of two checkouts:
engine/run/test_scope_docker.py)."""

from __future__ import annotations

import subprocess

from support.paths import ROOT


def test_make_down_is_scoped_to_runs_unless_all_is_typed():
    def dry(*args: str) -> str:
        return subprocess.run(
            ["make", "-n", "--no-print-directory", "down", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    assert "down --runs 'runs'" in dry() and "--all" not in dry()
    for value, passed in (("1", True), ("0", False), ("no", False)):
        assert ("--all" in dry(f"ALL={value}")) is passed, value


def test_a_run_carries_its_runs_folder_on_everything_compose_makes(tmp_path):
    from tuning.harness.backends import compose
    from tuning.harness.layout.layout import Layout
    from tuning.harness.layout.mounts import Mounts
    from tuning.harness.layout.topology import Topology

    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")  # a RUNS folder reached through a link: its real path
    layout = Layout(run_id="r", topology=Topology("per-rank"), mounts=Mounts(str(link / "r")))
    want = {"harness.run": "r", "harness.runs": str((tmp_path / "real").resolve())}
    assert layout.labels == want
    doc = compose.render(layout)
    for svc in doc["services"].values():
        assert svc["labels"].items() >= want.items()
    assert doc["networks"]["train"]["labels"] == want


def test_a_runs_folder_holds_the_runs_in_folders_under_it_too():
    """A bench's layout runs live in its own folder under RUNS (runs/<bench>/<run>): `make
    down` of RUNS is theirs too; a sibling folder with a longer name is not."""
    from tuning.harness.backends.engine import within

    assert within("/a/runs", "/a/runs") and within("/a/runs/b-1", "/a/runs")
    assert within("/a/runs/b-1", "/a/runs/") and within("/a/runs/b-1/x", "/a/runs")
    assert not within("/a/runs2", "/a/runs") and not within("/a", "/a/runs")
    assert not within(None, "/a/runs")  # a container of a harness without the label
