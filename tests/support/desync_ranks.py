"""Real gloo ranks of entries/desync_entry.py (a training loop's collectives) under torchrun
and the rank recorder, as a foreign ENTRY runs, and the verdict the host reads from them (the
`ranks` fixture of unit/conftest.py starts them and stops them after the test)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from support.paths import ENTRIES, ROOT
from tuning.harness.layout.options import free_port
from tuning.harness.run_files import metric_lines
from tuning.harness.stacks import dumps
from tuning.harness.verdict import facts, rules, torch_check
from tuning.harness.verdict.record import Verdict

ENTRY = ENTRIES / "desync_entry.py"


class Ranks:
    """torchrun with `n` ranks of desync_entry under the rank recorder, the fault in `env`."""

    def __init__(self, tmp_path: Path, n: int, env: dict):
        self.out, self.n = tmp_path / "out", n
        env = {
            **os.environ,
            "HARNESS_WRAPPED_ENTRY": "desync_entry",
            "PYTHONPATH": str(ENTRIES),
            "HARNESS_OUTPUT_DIR": str(self.out),
            "OMP_NUM_THREADS": "1",
            "DESYNC_ENTRY_TIMEOUT": "120",
            **env,
        }
        argv = [
            str(Path(sys.executable).with_name("torchrun")),
            "--nproc-per-node",
            str(n),
            "--master-port",
            str(free_port()),
            str(ROOT / "tuning/container/rank/rank_record.py"),
        ]
        self.log = tmp_path / "torchrun.log"
        self.agent = subprocess.Popen(
            argv, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT
        )

    def metrics(self) -> dict:
        return metric_lines.read_metrics(self.out) if (self.out / "metrics").exists() else {}

    def wait_for(self, done, what: str, limit_s: float = 120):
        deadline = time.monotonic() + limit_s
        while not (found := done()):
            assert self.agent.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"no {what}: {self.log.read_text()[-3000:]}"
            time.sleep(0.3)
        return found

    def judged(self, stuck) -> tuple[Verdict, dict]:
        """Dump every rank until `stuck(taken)` holds (each dump shows that moment), then the
        verdict over the dump, the metrics and torch's analysis of the flight recorders."""
        since, places = time.time(), [dumps.Node("host", list(range(self.n)))]
        taken = self.wait_for(
            lambda: (t := dumps.dump(self.out, places, "test")) and stuck(t) and t, "ranks stuck"
        )
        fr = torch_check.run_fr_check(places, self.out, since)
        found = facts.gather(self.n, self.metrics(), taken, fr_check=fr)
        return rules.judge(found), taken

    def stop(self) -> None:
        self.agent.terminate()  # torchrun stops its workers, then exits
        self.agent.wait(timeout=120)
