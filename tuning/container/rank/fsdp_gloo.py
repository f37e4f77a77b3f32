"""FSDP on CPU ranks (gloo), and no silent fallback from an FSDP config to DDP.

accelerate (1.16) turns an FSDP config into FSDP only on accelerator devices: its state labels
CPU ranks MULTI_CPU and skips the FSDP plugin for that label (accelerate/state.py), so every
rank would train a full replica. torch's FSDP2 shards on gloo: relabelled MULTI_GPU just
before an Accelerator is built, the ranks get the config's FSDP plugin on the CPU device.

`install()` wraps `accelerate.Accelerator.__init__` to do that, and to fail a rank whose
config asked for FSDP (the launcher's HARNESS_DISTRIBUTED_TYPE) but got something else.
Standalone on purpose (standard library at import, accelerate when installed): our trainer
imports it, and the harness mounts it beside the rank recorder into a user's image
(fms-hf-tuning's), so a trainer we cannot edit gets the same.
"""

from __future__ import annotations

import os


class NotSharded(RuntimeError):
    """The config asked for FSDP and accelerate set up something else."""


def check(ran: str, asked: str | None = None) -> None:
    asked = asked if asked is not None else os.environ.get("HARNESS_DISTRIBUTED_TYPE")
    if asked == "FSDP" and ran != "FSDP":
        raise NotSharded(
            f"the accelerate config asks for FSDP but accelerate set up {ran} (every rank would "
            "hold the whole model); launch with the config's own mode (no --multi_gpu), so "
            "that accelerate sets ACCELERATE_USE_FSDP=true"
        )


def _on_cpu() -> bool:
    return os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true")


def install() -> None:
    """From now on every Accelerator on a CPU rank with an FSDP config gets FSDP, and one
    that asked for FSDP and did not get it raises NotSharded before any training step."""
    import accelerate
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    original = accelerate.Accelerator.__init__
    if getattr(original, "harness_fsdp_gloo", False):
        return

    def __init__(self, *args, **kwargs):
        if os.environ.get("ACCELERATE_USE_FSDP") == "true" and _on_cpu():
            state = PartialState()
            if state.distributed_type == DistributedType.MULTI_CPU:
                state.distributed_type = DistributedType.MULTI_GPU
        original(self, *args, **kwargs)
        check(str(self.distributed_type.value))

    __init__.harness_fsdp_gloo = True
    accelerate.Accelerator.__init__ = __init__
