"""What each rank runs, as whom, and with which variables: this repo's trainer or ENTRY with
its ARGS, the ranks' user, the harness's variables and the secrets passed by name."""

from __future__ import annotations

from dataclasses import dataclass

from tuning.harness.contract.container import CONTAINER_UID


@dataclass(frozen=True)
class Trainer:
    entry: str | None = None  # a foreign trainer's module, or its script as the ranks see it
    # (/src/train.py); None: this repo's tuning.sft_trainer
    args: tuple[str, ...] | None = None  # ARGS: ENTRY's own command line (None: a JSON job)
    recorder_steps: bool = True  # ENTRY's HF Trainer steps logged by the rank recorder (not fms)
    user: str = CONTAINER_UID  # the ranks' uid:gid (contract/ranks_user.py: who runs the harness)
    login: str | None = None  # their name (USER, LOGNAME) when the image may not know the uid
    extra_env: tuple[tuple[str, str], ...] = ()  # harness variables for the ranks
    # Secrets (HF_TOKEN, ...) travel by NAME: rendered files say `NAME: null`, and Compose
    # (or the host launcher) takes the value from the harness's environment at start.
    secrets: tuple[str, ...] = ()

    @property
    def job_file(self) -> str:
        return "job.json" if self.entry else "job.yaml"
