"""Where a layout's ranks run and how they reach each other: LAYOUT's kind, the GPUs (the run's
one `GpuPlan`, held whole: every GPU question is asked of it), CPU ranks, the rendezvous port
and NETWORK. Its checks, and what NETWORK means for a node, are layout.py's."""

from __future__ import annotations

from dataclasses import dataclass

from tuning.harness.contract.container import PORT
from tuning.harness.machine.devices import GpuPlan
from tuning.harness.machine.image_recipes import IMAGE

CPU_PLAN = GpuPlan(0, IMAGE)  # no GPU asked: CPU ranks on the harness image
BACKEND = {"gpu": "nccl", "cpu": "gloo"}  # the process groups' backend on each device


@dataclass(frozen=True)
class Topology:
    kind: str = "single"
    plan: GpuPlan = CPU_PLAN  # the GPUs (devices.for_host, for_cluster): count, ids, image
    nproc: int = 2  # CPU ranks when the plan has no GPU
    port: int = PORT
    network: str = "isolated"  # per-rank: own network/IPC per rank, or shared with rank 0

    @property
    def gpus(self) -> int:
        return self.plan.count

    @property
    def device(self) -> str:
        """gpu or cpu: the one answer to CPU or GPU (the plan's, devices.device_of)."""
        return self.plan.device

    @property
    def backend(self) -> str:
        return BACKEND[self.device]

    @property
    def world_size(self) -> int:
        return self.plan.count or self.nproc

    @property
    def gpu_ids(self) -> tuple[str, ...]:
        """The host GPUs the ranks take: the plan's, or 0..N-1 where no host was asked."""
        return self.plan.ids or tuple(str(i) for i in range(self.plan.count))

    def gpus_said(self) -> str | None:
        """The dry run's word on the host GPUs taken, where nvidia-smi was asked."""
        if not self.plan.chosen:
            return None
        return f"gpus: {self.plan.describe()}; driver {self.plan.driver}"

    def host_gpu_env(self) -> dict[str, str]:
        """LAYOUT=host: the ranks see the GPUs this run took, and no other. By UUID: the
        indices nvidia-smi (and the locks) use follow PCI bus order, CUDA's own are fastest
        first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so an index could name another GPU."""
        ids = tuple(g.uuid for g in self.plan.chosen) or self.gpu_ids
        return {"CUDA_VISIBLE_DEVICES": ",".join(ids), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
