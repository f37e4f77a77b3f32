"""The flags of a run are typed once into a frozen value, and variants are made from it."""

from __future__ import annotations

import dataclasses

import pytest

from tuning.harness import cli
from tuning.harness.bench import plan
from tuning.harness.errors import HarnessError
from tuning.harness.flags.run_flags import RunFlags


def parsed(*args: str) -> RunFlags:
    return RunFlags.of(cli.parser().parse_args(["up", *args]))


def test_whole_numbers_and_sizes_are_typed():
    f = parsed("--gpus", "0", "--nproc", "3", "--steps", "5", "--seed", "0", "--memory", "8G")
    assert (f.gpus, f.nproc, f.steps, f.seed, f.memory) == (0, 3, 5, 0, "8g")
    assert (f.timeout, f.max_restarts, f.pids) == (None, 0, None)
    assert parsed().nproc == 2 and parsed().gpus is None  # unset GPUS: every visible GPU


def test_flags_are_frozen():
    f = parsed("--gpus", "0")
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.gpus = 2  # type: ignore[misc]


def test_bad_numbers_name_their_variable():
    with pytest.raises(HarnessError, match="PIDS=8 must be at least 16"):
        parsed("--pids", "8")
    with pytest.raises(HarnessError, match="TIMEOUT='soon' is not a whole number"):
        RunFlags.of(cli.parser().parse_args(["kube", "--timeout", "soon"]))


def test_bench_makes_each_layout_run_from_the_users_flags(tmp_path):
    """Every layout run is a variant (dataclasses.replace); the user's flags stay as given."""
    a = cli.parser().parse_args(["bench", "--gpus", "0", "--runs", str(tmp_path)])
    f = RunFlags.of(a)
    spec = plan.spec(
        a, f, tmp_path / "b", "b-r1-per-rank-shared-probe", "per-rank-shared", probe=True, threads=3
    )
    lay = spec.layout
    t = lay.topology
    assert (t.kind, t.network, spec.runs_root) == ("per-rank", "shared", tmp_path / "b")
    env = dict(lay.trainer.extra_env)
    assert env["OMP_NUM_THREADS"] == "3" and env["HARNESS_ENTRY"] == "tuning.container.probe"
    assert env["HARNESS_ENTRY_ARGS"].startswith("--out /output --min-bytes 1024")
    assert (f.layout, f.network, f.runs) == ("single", "isolated", str(tmp_path))


def test_a_flags_way_to_the_compose_file_crosses_four_modules():
    """NETWORK from `make up` to compose.yaml: flags/run_flags types it, layout/options hands it to
    the Layout, layout/layout checks it and says what it means for each node
    (`shared_namespaces`), and backends/compose renders what layout says. No other module
    outside commands/ (where fault chooses layouts) and bench/plan.py (bench's) reads it: cli
    and commands/up pass the flags on untouched. (Compose's network, `<project>_train`, is
    COMPOSE_NETWORK.)"""
    import ast

    from support.paths import ROOT
    from tuning.harness.flags.run_flags import RunFlags

    harness = ROOT / "tuning/harness"
    readers = set()
    for path in harness.rglob("*.py"):
        if path.relative_to(harness).parts[0] == "commands":  # and its sub-packages
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            if (isinstance(n, ast.Attribute) and n.attr == "network") or (
                isinstance(n, ast.Name) and n.id in ("NETWORK", "NETWORKS")
            ):
                readers.add(str(path.relative_to(harness)))
    assert readers == {"layout/options.py", "layout/layout.py", "bench/plan.py"}
    compose = (harness / "backends/compose.py").read_text()
    assert "layout.shared_namespaces" in compose
    assert "network" in RunFlags.__dataclass_fields__  # flags/run_flags.py: the fourth
