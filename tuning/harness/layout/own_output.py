"""/output where one command puts it instead of the run's output dir, metrics still bound from
the run's: the harness follows the ranks by them. Each is one command's need, so it travels on
that command's Spec (options.py), not on the Layout."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OwnOutput:
    # A Docker volume (fault disk-full: a size-limited tmpfs the fault makes and copies out)
    volume: str | None = None
    # (node, host folder) (kube's rehearsal: a claim's stand-in, shared; a pod's emptyDir, its own)
    nodes: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.volume or self.nodes)

    def of(self, node: str) -> str | None:
        """The host folder a node has at /output, where it has one of its own."""
        return dict(self.nodes).get(node)


RUN_OUTPUT = OwnOutput()  # none: /output is the run's output dir, as for every other run
