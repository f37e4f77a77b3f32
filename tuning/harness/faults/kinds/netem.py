"""delay and loss: netem on the rank's network (per-rank: its eth0; single: lo of the one
namespace, so every rank's traffic), through a helper container from the same image, root with
NET_ADMIN, in the rank's network namespace; removed at teardown. Before the run the kernel is
asked once, in a throwaway helper, whether it has netem: without it the kind is unsupported."""

from __future__ import annotations

import docker.errors

from tuning.harness.backends import engine, images
from tuning.harness.contract.container import RUNS_LABEL
from tuning.harness.faults.kinds.kind import HANGS, Kind

NETEM = {"delay": "delay 100ms", "loss": "loss 30%"}


def netem(inj, nodes, ctr, pid) -> str:
    name = inj.kind.name
    dev = "eth0" if inj.per_rank else "lo"
    rule = f"tc qdisc add dev {dev} root netem {NETEM[name]}"
    helper = nodes.client.containers.run(
        ctr.image.id,
        ["-c", f"{rule} && exec sleep 100000"],
        entrypoint="sh",
        user="root",
        cap_add=["NET_ADMIN"],
        network_mode=f"container:{ctr.id}",
        detach=True,
        labels={**nodes.layout.labels, "harness.fault": name},
        name=f"harness-{inj.run_id}-fault-{name}",
    )
    inj.heals.append(lambda: helper.remove(force=True))
    return f"helper {helper.name} (NET_ADMIN, network_mode container:{ctr.name}): {rule}"


def unsupported(layout, name: str) -> str | None:
    """Try netem once in a throwaway helper (same image, NET_ADMIN, no network)."""
    c = engine.client()
    images.ready(c, layout, log=lambda *_: None)
    try:
        c.containers.run(
            layout.topology.plan.image,
            ["-c", f"tc qdisc add dev lo root netem {NETEM[name]}"],
            entrypoint="sh",
            user="root",
            cap_add=["NET_ADMIN"],
            network_mode="none",
            labels=layout.labels,
            remove=True,
            stderr=True,
        )
        return None
    except docker.errors.ContainerError as e:
        err = (e.stderr or b"").decode(errors="replace").strip() or str(e)
        return f"netem not supported by this kernel: {err}"
    finally:
        engine.remove_labelled(c, layout.run_id, runs=layout.labels[RUNS_LABEL])


def _netem(name: str, order: int) -> Kind:
    return Kind(
        name, order, inject=netem, check=lambda layout: unsupported(layout, name), expect=HANGS
    )


KINDS = (_netem("delay", 130), _netem("loss", 140))
