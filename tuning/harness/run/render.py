"""What a run writes before its nodes start, which is also what a dry run prints: each node's
launch command (from the image's own launcher, tuning/container/launch.py) and the backend's
files."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tuning.container import launch
from tuning.harness.backends.nodes import backend
from tuning.harness.layout.layout import Layout
from tuning.harness.layout.own_output import RUN_OUTPUT, OwnOutput


def node_commands(layout: Layout, accelerate_config: Path) -> dict[str, dict]:
    """Each node's launch command and environment, from the image's own launcher; the host
    reads `accelerate_config`, the file each node will find at ACCELERATE_CONFIG."""
    out = {}
    for node in layout.nodes():
        job = layout.trainer_args
        argv, extra = launch.command(node.env, job, str(accelerate_config))
        out[node.name] = {"argv": argv, "env": {**node.env, **extra}}
    return out


def render(
    layout: Layout, commands: dict[str, dict], output: OwnOutput = RUN_OUTPUT
) -> dict[str, str]:
    """The files a run writes before its nodes start, besides /job (path in the run
    directory -> text): each node's launch command, and the backend's own (compose.yaml);
    `output`: /output where the run's command puts it."""
    files = {
        f"ranks/{name}.launch.json": json.dumps(cmd, indent=2) + "\n"
        for name, cmd in commands.items()
    }
    return {**files, **backend(layout).render(layout, output)}


def dry_run(layout: Layout, accelerate_config: Path, prefix: str = "# ", files=True) -> None:
    """What would run, printed: the backend's files (up: the Compose file), then each
    node's command. Nothing starts and nothing is written."""
    commands = node_commands(layout, accelerate_config)
    for path, text in render(layout, commands).items() if files else ():
        if not path.startswith("ranks/"):
            print(text)
    for name, cmd in commands.items():
        print(f"{prefix}{name}: {shlex.join(cmd['argv'])}")
