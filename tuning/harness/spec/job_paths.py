"""Where the ranks find the model and the data: decided once, for every command, from MODEL
and DATA and from the job file's own `model_name_or_path` and `training_data_path`. A path the
user gave is used or refused with the reason; it is never replaced by the demo's without a word.

A `Source` is one of:
- `host`: a path on this machine, bound read-only into the containers (LAYOUT=host: as is);
- `image`: a path inside the image (the demo's assets; a path in a user's own image);
- `claim`: a PersistentVolumeClaim and a path in it (kube only: `pvc:<claim>/<path>`);
- `cluster`: the job file's own path, kept for a cluster's pods (kube only);
- `demo`: nothing named: the demo's tiny model or data, baked into the image.

`make up` (and bench, fault) run here: MODEL and DATA are host paths; a job file's path is a
host path when it exists here, our image's asset path, or (IMAGE=your own) a path inside that
image. `make kube` renders for a cluster: MODEL and DATA are a claim or a path inside the image,
a path that exists on this machine is refused (a pod cannot see it), and the job file's own
paths are kept as they are: they name cluster paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuning.harness.errors import ROOT, HarnessError
from tuning.harness.spec.layout import IMAGE_DATA, IMAGE_MODEL, MODEL_DIR, Layout, data_target

HOST_ASSETS = ROOT / "build/assets"  # LAYOUT=host: the tiny model and demo data, made here

KEYS = {"MODEL": "model_name_or_path", "DATA": "training_data_path"}
IMAGE_ASSETS = {"MODEL": IMAGE_MODEL, "DATA": IMAGE_DATA}
CLAIM_PREFIX = "pvc:"
IMAGE_PREFIX = "image:"


@dataclass(frozen=True)
class Source:
    var: str  # MODEL or DATA
    where: str  # host | image | claim | cluster | demo
    path: str  # host path, path in the image, or the path inside the claim
    said_by: str  # what named it: "MODEL", "the job file's model_name_or_path", "the demo"
    claim: str | None = None

    def describe(self) -> str:
        what = {
            "host": f"{self.path} on this machine",
            "image": f"{self.path} inside the image",
            "claim": f"{self.path} on claim {self.claim}",
            "cluster": f"{self.path} as the pods see it",
            "demo": "the demo's " + ("tiny model" if self.var == "MODEL" else "data"),
        }
        return f"{what[self.where]} ({self.said_by})"  # fmt: skip


def _job_value(job: dict, var: str) -> str | None:
    value = job.get(KEYS[var])
    return str(value) if value not in (None, "") else None


def _check_kind(src: Source) -> Source:
    if src.where == "host":
        path = Path(src.path)
        want = path.is_dir() if src.var == "MODEL" else path.exists()
        if not want:
            kind = "directory" if src.var == "MODEL" else "file or directory"
            raise HarnessError(f"{src.said_by}={src.path}: no such {kind} on this machine")
    return src


def for_run(var: str, flag: str | None, job: dict, job_name: str, own_image: bool) -> Source:
    """MODEL or DATA for a run here (up, bench, fault)."""
    key = f"{job_name}'s {KEYS[var]}"
    if flag:
        return _check_kind(Source(var, "host", str(Path(flag).expanduser().resolve()), var))
    value = _job_value(job, var)
    if value is None:
        return Source(var, "demo", IMAGE_ASSETS[var], "the demo: JOB and " + var + " name none")
    if value == IMAGE_ASSETS[var]:
        return Source(var, "image", value, key)
    path = Path(value).expanduser()
    if path.exists():
        return Source(var, "host", str(path.resolve()), key)
    if own_image and path.is_absolute():
        return Source(var, "image", value, key + " (not on this machine: taken as a path "
                      "inside IMAGE)")  # fmt: skip
    raise HarnessError(
        f"{key} is {value}, which is not on this machine; the ranks read only what is here "
        f"(bound into the containers) or inside the image: set {var}=<local path>, or fix "
        f"{KEYS[var]} in the job file"
    )


def for_cluster(var: str, flag: str | None, job: dict, job_name: str) -> Source:
    """MODEL or DATA for a cluster's pods (kube): a claim, a path inside the image, or the job
    file's own path, kept."""
    if flag:
        if flag.startswith(CLAIM_PREFIX):
            claim, _, sub = flag[len(CLAIM_PREFIX) :].lstrip("/").partition("/")
            if not claim or not sub:
                raise HarnessError(f"{var}={flag}: a claim is {CLAIM_PREFIX}<claim>/<path in it>,"
                                   f" e.g. {var}=pvc:models/granite-3b")  # fmt: skip
            return Source(var, "claim", sub.strip("/"), var, claim=claim)
        explicit = flag.startswith(IMAGE_PREFIX)
        path = flag[len(IMAGE_PREFIX) :] if explicit else flag
        if not path.startswith("/"):
            raise HarnessError(
                f"{var}={flag}: a path inside the image is absolute "
                f"({var}=image:/models/x), or a claim: {var}=pvc:<claim>/<path>"
            )
        if not explicit and Path(path).exists():
            raise HarnessError(
                f"{var}={flag} is a path on this machine, and a cluster's pods cannot see it: "
                f"put it on a PersistentVolumeClaim ({var}={CLAIM_PREFIX}<claim>/<path>) or bake "
                f"it into the image and name it there ({var}={IMAGE_PREFIX}{path})"
            )
        return Source(var, "image", path, var)
    value = _job_value(job, var)
    if value is None:
        return Source(var, "demo", IMAGE_ASSETS[var], "the demo: JOB and " + var + " name none")
    return Source(var, "cluster", value, f"{job_name}'s {KEYS[var]}, kept")


def rank_path(src: Source, layout: Layout) -> str:
    """The path the ranks read: where a host path is bound (/model, /data/<name>), or a claim
    mounted (the same places), or a path in the image as it is. LAYOUT=host reads host paths
    as they are, and the demo's assets made on the host (lifecycle)."""
    host_assets = {IMAGE_MODEL: HOST_ASSETS / "tiny-model", IMAGE_DATA: HOST_ASSETS / "demo.jsonl"}
    if layout.kind == "host":
        return str(host_assets.get(src.path, src.path))
    if src.where in ("host", "claim"):
        return MODEL_DIR if src.var == "MODEL" else data_target(src.path)
    return src.path
