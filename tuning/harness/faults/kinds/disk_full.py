"""The disk-full fault: when a save starts, the output volume has less room than a checkpoint.

/output is a size-limited tmpfs volume for this run only (never the host's disk), shared by
every rank as a cluster's PVC is; the metrics stay on the host (compose.py). Once the target
rank is at its step and a complete checkpoint is on the volume, the harness fills the volume
until half a checkpoint is left, so the next save fails with ENOSPC and the earlier checkpoint
stays whole. A keeper container holds the volume (a tmpfs lives while something mounts it) so
that what the ranks wrote is copied into runs/<id>/output after they are gone.

The fill runs in the keeper while every container of the run is frozen (`docker pause`): fms's
unpaced steps save about every 0.6 s here, and a fill made beside running ranks raced their saves.
CI from nothing met it (fms, per-rank): the fill, run in rank 0's container, left the volume full
just as checkpoint-40 began, rank 0 died on ENOSPC, its container's end killed the fill's exec
before it said what it filled, and the run was recorded "injection failed".
"""

from __future__ import annotations

import json
import re
import tarfile
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from tuning.container.rank import torn
from tuning.harness.backends import engine, images
from tuning.harness.contract.container import LABEL, OUTPUT_DIR, TORN
from tuning.harness.faults.fault_json import FaultRecord, RankEnd
from tuning.harness.faults.kinds.kind import FAILS, Kind
from tuning.harness.layout.own_output import OwnOutput
from tuning.harness.run_files.metric_lines import FMS_LOGS

KIND = "disk-full"
VOLUME_MB = 512  # the tmpfs's limit: room for the demo's checkpoints; what is written uses RAM
FILLER = ".harness-disk-full"  # the file that takes the room (not copied out)
SKIP = (FILLER, "metrics", FMS_LOGS)  # the filler; what is on the host already
KEEP = "/keep"  # the keeper's mount of the volume
ENOSPC = re.compile(r"No space left on device|\[Errno 28\]|os error 28|StorageFull")
CLUSTER = (
    "a full PVC fails the save the same way: the rank raises ENOSPC, the group fails, and a "
    "restart (restartPolicy OnFailure) meets the same full volume and fails again at its next "
    "save until backoffLimit ends the job; nothing frees the room but a person. The HF Trainer "
    "writes checkpoint-N in place, so the failed save is left torn under its final name"
)

# Run in the keeper (the ranks frozen): the newest complete checkpoint's size (torn.py's rule,
# bound in at TORN), then a filler leaves half of it free. Prints {} while no complete checkpoint
# exists yet, or while a save is under way: filled in the middle of a save, its partial files made
# the room left uneven and the rank's error was not named ENOSPC.
_FILL = f"""
import json, os, sys
sys.path.insert(0, os.path.dirname({TORN!r}))
import torn
done = [p for p in torn.checkpoints({KEEP!r}) if torn.missing(p) is None]
if not done or torn.incomplete({KEEP!r}):
    print("{{}}")
    raise SystemExit
size = sum(f.stat().st_size for f in done[-1].rglob("*") if f.is_file())
def free():
    st = os.statvfs({KEEP!r})
    return st.f_bavail * st.f_frsize
before = free()
fd = os.open({KEEP!r} + "/{FILLER}", os.O_WRONLY | os.O_CREAT, 0o644)
os.posix_fallocate(fd, 0, max(before - size // 2, 1))
os.close(fd)
print(json.dumps({{"checkpoint": done[-1].name, "checkpoint_bytes": size,
                  "free_before": before, "free_after": free()}}))
"""
ATTEMPTS = 6  # freezes a tick may try before it leaves the fill to the next tick
THAW_S = 0.3  # a save under way at a freeze is given this long (fms's take about 0.2 s here)


def fill(keeper) -> dict | None:
    """Fill the volume from its keeper; None until a checkpoint is complete and no save is
    under way."""
    out = keeper.exec_run(["python3", "-c", _FILL])
    text = out.output.decode(errors="replace").strip().splitlines()
    facts = json.loads(text[-1]) if out.exit_code == 0 and text else {}
    return facts or None


def how(filled: dict) -> str:
    free, size = filled["free_after"] / (1 << 20), filled["checkpoint_bytes"] / (1 << 20)
    return (
        f"{OUTPUT_DIR} ({VOLUME_MB} MiB tmpfs) filled to {free:.1f} MiB free, half of "
        f"{filled['checkpoint']} ({size:.1f} MiB)"
    )


class Volume:
    """The run's size-limited /output, and the keeper that holds it until it is copied out."""

    def __init__(self, client, layout):
        self.name = f"{layout.project}-output"
        # Not the run's own label value: the run's teardown must leave both for the copy;
        # `make down` (every run of its RUNS folder) still finds them by the label's key.
        labels = {**layout.labels, LABEL: f"{layout.run_id}-keep"}
        images.ready(client, layout, log=lambda *_: None)
        self.volume = client.volumes.create(
            self.name,
            driver="local",
            labels=labels,
            driver_opts={"type": "tmpfs", "device": "tmpfs", "o": f"size={VOLUME_MB}m,mode=1777"},
        )
        self.keeper = client.containers.run(
            layout.topology.plan.image,
            ["-c", "exec sleep 86400"],
            entrypoint="sh",
            user=layout.trainer.user,
            network_mode="none",
            volumes={
                self.name: {"bind": KEEP, "mode": "rw"},
                str(Path(torn.__file__).resolve()): {"bind": TORN, "mode": "ro"},
            },
            labels=labels,
            name=f"{layout.project}-keeper",
            detach=True,
        )

    def copy_out(self, output: Path) -> None:
        """What the ranks wrote into `output` (the run's dir), less the filler and what was
        bound from there already (metrics, fms's log)."""
        stream, _ = self.keeper.get_archive(KEEP)  # a tar of keep/...
        with tempfile.TemporaryFile() as f:
            for chunk in stream:
                f.write(chunk)
            f.seek(0)
            with tarfile.open(fileobj=f) as tar:
                for m in tar.getmembers():
                    parts = Path(m.name).parts[1:]
                    if not parts or parts[0] in SKIP or m.issym() or m.islnk():
                        continue
                    m.name = str(Path(*parts))
                    tar.extract(m, output)  # owner and mode as the ranks left them

    def remove(self) -> None:
        self.keeper.remove(force=True)
        self.volume.remove(force=True)


def facts(filled: dict | None, ranks: list[RankEnd], output: Path) -> dict:
    """fault.json's "disk": the fill, the ranks that met ENOSPC (with the path, where their error
    names one), the checkpoints left complete and the one the failed save left torn."""
    if not filled:
        return {}
    hit = []
    for x in ranks:
        err = x.error or ""
        if x.signature == "ENOSPC":
            path = re.search(rf"({OUTPUT_DIR}/[^'\"\s:]+)", err)
            hit.append({"rank": x.rank, "errno": 28, "path": path and path.group(1)})
    return {
        **filled,
        "volume_mb": VOLUME_MB,
        "enospc": hit,
        "complete": [p.name for p in torn.checkpoints(output) if torn.missing(p) is None],
        "torn": [p.name for p, _ in torn.incomplete(output)],
    }


def lines(rec: FaultRecord) -> list[str]:
    """fault.md's lines on the full volume."""
    disk = rec.own.get("disk")
    if not disk:
        return []
    hit = (
        "; ".join(
            f"rank {x['rank']}: ENOSPC (errno 28) writing {x['path'] or 'its checkpoint'}"
            for x in disk["enospc"]
        )
        or "no rank reported ENOSPC"
    )
    return [
        f"- disk: {hit}",
        f"- checkpoints left complete: {', '.join(disk['complete']) or 'none'}; torn by the "
        "failed save (never resumed: tuning/container/rank/torn.py): "
        f"{', '.join(disk['torn']) or 'none'}",
    ]


def _running(nodes) -> list:
    """The run's containers that run now (their state read again from the engine)."""
    for c in nodes.all_containers():
        c.reload()
    return [c for c in nodes.all_containers() if c.status == "running"]


def inject(inj, nodes, ctr, pid) -> str | None:
    """Past AT_STEP, once a checkpoint is complete and no save is under way: fill the volume
    (every rank's) from its keeper, with the run's containers frozen so that no save starts
    during the fill. A save found under way is thawed THAW_S to finish, up to ATTEMPTS times."""
    (keeper,) = engine.client().containers.list(filters={"label": f"{LABEL}={inj.run_id}-keep"})
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(THAW_S)
        running = _running(nodes)
        if ctr not in running:
            return None  # the run has ended: nothing is left to fail a save
        for c in running:
            c.pause()
        try:
            inj.state["filled"] = filled = fill(keeper)
        finally:
            for c in running:
                c.unpause()
        if filled:
            inj.when = time.time()  # the fault is in place once the filler is written
            return how(filled)
    return None


@contextmanager
def on_volume(spec):
    """The run's /output on its own volume; once the ranks are gone, what they wrote into the
    run's dir, then the volume and its keeper are removed."""
    volume = Volume(engine.client(), spec.layout)
    spec.own_output = OwnOutput(volume=volume.name)
    try:
        yield
    finally:
        volume.copy_out(spec.runs_root / spec.layout.run_id / "output")
        volume.remove()


KINDS = (
    Kind(
        KIND,
        30,
        inject=inject,
        pid="never",
        staged=on_volume,
        expect=FAILS,
        cluster=CLUSTER,
        # it must fail by the full volume, not by anything else
        goal=lambda rec: bool((rec.own.get("disk") or {}).get("enospc")) and FAILS.goal(rec),
        signatures=(("ENOSPC", ENOSPC.pattern),),
        facts=lambda follow, seen: {
            "disk": facts(follow.inject.state.get("filled"), seen.ranks, seen.output)
        },
        lines=lines,
    ),
)
