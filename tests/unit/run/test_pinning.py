"""Each rank on its own cores (tuning/container/shared/affinity.py): the split, the Compose cpuset
of every layout's containers, the host launcher's CPUs, and a real process narrowing itself to its
rank's list (this machine's CPUs, not a stand-in)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tuning.container.shared import affinity
from tuning.harness.backends import compose
from tuning.harness.backends.nodes import _die_with
from tuning.harness.layout.layout import Layout
from tuning.harness.layout.topology import Topology
from tuning.harness.layout.trainer import Trainer

PINNED = ((affinity.VAR, "0;1"),)  # what bench gives 2 ranks on a 2-core machine


def test_split_gives_each_rank_its_own_contiguous_cores():
    assert affinity.split([0, 1], 2) == [[0], [1]]  # NPROC=2 on this machine: core 0, core 1
    assert affinity.split(range(16), 3) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]
    assert affinity.split([4, 2, 3, 5], 2) == [[2, 3], [4, 5]]
    assert affinity.split([0], 2) == [[0], [0]]  # fewer cores than ranks: they share
    assert affinity.encode([[0, 1, 2], [5]]) == "0,1,2;5"
    assert affinity.decode("0-2,5;7") == [[0, 1, 2, 5], [7]]


@pytest.mark.parametrize(
    ("kind", "network", "cpusets"),
    [
        ("single", "isolated", ["0,1"]),
        ("per-rank", "isolated", ["0", "1"]),
        ("per-rank", "shared", ["0", "1"]),
    ],
)
def test_every_container_gets_its_ranks_cores(kind, network, cpusets):
    topology = Topology(kind, network=network)
    layout = Layout(run_id="t", topology=topology, trainer=Trainer(extra_env=PINNED))
    services = compose.render(layout)["services"].values()
    assert [svc["cpuset"] for svc in services] == cpusets
    for svc in services:
        assert svc["environment"][affinity.VAR] == "0;1"  # each rank then takes its own
    unpinned = compose.render(Layout(run_id="t", topology=topology))["services"]
    assert all("cpuset" not in svc for svc in unpinned.values())


def _affinity_of_child(preexec=None, env=None) -> list[str]:
    """A real child process: what pin_rank returned, and the CPUs it then runs on."""
    code = (
        "import os; from tuning.container.shared.affinity import pin_rank; r = pin_rank(); "
        "print(r, sorted(os.sched_getaffinity(0)))"
    )
    env = {**os.environ, **(env or {})}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=preexec,
        env=env,
    )
    return out.stdout.split(" ", 1)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin apart")
def test_a_rank_narrows_itself_to_its_own_cores():
    first, second = sorted(os.sched_getaffinity(0))[:2]
    value = f"{first};{second}"
    assert _affinity_of_child(env={affinity.VAR: value, "RANK": "1"}) == [
        f"[{second}]",
        f"[{second}]\n",
    ]
    assert _affinity_of_child(env={affinity.VAR: value, "RANK": "0"}) == [
        f"[{first}]",
        f"[{first}]\n",
    ]
    everything = sorted(os.sched_getaffinity(0))
    assert _affinity_of_child(env={affinity.VAR: ""}) == ["None", f"{everything}\n"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin apart")
def test_the_host_launcher_starts_on_the_ranks_cores():
    second = sorted(os.sched_getaffinity(0))[1]
    assert _affinity_of_child(preexec=_die_with(os.getpid(), str(second))) == [
        "None",
        f"[{second}]\n",
    ]
