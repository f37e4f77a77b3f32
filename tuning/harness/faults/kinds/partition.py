"""partition: the rank's container is disconnected from the run's network (per-rank only)."""

from __future__ import annotations

from tuning.harness.contract.container import COMPOSE_NETWORK
from tuning.harness.faults.kinds.kind import FAILS, Kind

SINGLE = (
    "every rank of a single container talks to the others over loopback inside one "
    "network namespace; there is no link between ranks to cut (cutting loopback cuts them "
    "all). Use LAYOUT=per-rank."
)
SHARED = (
    "per-rank with NETWORK=shared puts every rank in rank 0's network namespace; there is "
    "no link between ranks to cut. Use NETWORK=isolated."
)


def partition(inj, nodes, ctr, pid) -> str:
    how = ""
    for name in list(ctr.attrs["NetworkSettings"]["Networks"]):
        if name.endswith(f"_{COMPOSE_NETWORK}"):
            nodes.client.networks.get(name).disconnect(ctr, force=True)
            how = f"docker network disconnect {name} {ctr.name}"
    return how


KINDS = (
    Kind(
        "partition",
        100,
        inject=partition,
        not_here={"single": SINGLE, "shared": SHARED},
        expect=FAILS,
        judged="network",
        pool_place=7,
    ),
)
