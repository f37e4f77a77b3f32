"""What the rank recorder (rank_record.py) changes in the trainer's libraries before the trainer
runs: transformers' Trainer saves held for save-kill, and torch's env:// rendezvous store given
per-attempt keys under torchrun's restarts. Standard library only at import (mounted beside the
recorder in a user's image); a library the trainer lacks is left alone."""

from __future__ import annotations

import importlib
import os
import time


def hold_saves() -> None:
    """save-kill (HARNESS_SAVE_SLEEP=s, set by that fault only): hold every HF Trainer save s
    seconds after the weights, before the optimizer and trainer_state.json (transformers'
    Trainer._save_checkpoint writes them in that order), so the harness's kill lands inside it,
    as our trainer's atomic_save.py does. A trainer without transformers is left as it is."""
    pause = float(os.environ.get("HARNESS_SAVE_SLEEP") or 0)
    if not pause:
        return
    try:
        from transformers import Trainer
    except ImportError:
        return
    inner = Trainer._save_optimizer_and_scheduler

    def held(self, output_dir, *args, **kwargs):
        time.sleep(pause)
        return inner(self, output_dir, *args, **kwargs)

    Trainer._save_optimizer_and_scheduler = held


def store_per_attempt() -> None:
    """torchrun's restarts under a static rendezvous (single: every rank in one container) hand
    the restarted workers the agent's same TCPStore, and torch 2.8's env:// rendezvous adds no
    per-attempt prefix: a restarted gloo group can read its peers' previous addresses and fail
    ("Gloo connectFullMesh failed ... Connection refused", measured with fms's torch 2.8). Give
    each attempt its own keys, as torch's env:// rendezvous once did ("/worker/attempt_N")."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return
    try:  # the module (torch.distributed's `rendezvous` attribute is a function of it)
        rdzv = importlib.import_module("torch.distributed.rendezvous")
        from torch.distributed import PrefixStore
    except ImportError:
        return
    create, attempt = rdzv._create_c10d_store, os.environ.get("TORCHELASTIC_RESTART_COUNT")

    def per_attempt(*args, **kwargs):
        return PrefixStore(f"/worker/attempt_{attempt}", create(*args, **kwargs))

    rdzv._create_c10d_store = per_attempt
