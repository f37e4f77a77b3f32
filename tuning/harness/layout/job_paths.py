"""Where the ranks find the model and the data: decided once, for every command, from MODEL
and DATA and from the job file's own `model_name_or_path` and `training_data_path`. A path the
user gave is used or refused with the reason; it is never replaced by the demo's without a word.

A `Source` is one of:
- `host`: a path on this machine, bound read-only into the containers (LAYOUT=host: as is);
- `image`: a path inside the image (the demo's assets; a path in a user's own image);
- `claim`: a PersistentVolumeClaim and a path in it (kube only: `pvc:<claim>/<path>`);
- `demo`: nothing named: the demo's tiny model or data, baked into the image.

`make up` (and bench, fault) run here: MODEL and DATA are host paths; a job file's path is a
host path when it exists here, our image's asset path, or (IMAGE=your own) a path inside that
image. `make kube` renders for a cluster: MODEL and DATA, from a flag or the job file alike, are a
claim or a path inside the image; a path that exists on this machine is refused (a pod cannot see
it). A job file's relative path is relative to the job file's folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from tuning.harness.contract.container import IMAGE_DATA, IMAGE_MODEL, MODEL_DIR, data_target
from tuning.harness.errors import ROOT, HarnessError
from tuning.harness.layout.layout import Layout

HOST_ASSETS = ROOT / "build/assets"  # LAYOUT=host: the tiny model and demo data, made here

KEYS = {"MODEL": "model_name_or_path", "DATA": "training_data_path"}
IMAGE_ASSETS = {"MODEL": IMAGE_MODEL, "DATA": IMAGE_DATA}
CLAIM_PREFIX = "pvc:"
IMAGE_PREFIX = "image:"


@dataclass(frozen=True)
class Source:
    var: str  # MODEL or DATA
    where: str  # host | image | claim | demo
    path: str  # host path, path in the image, or the path inside the claim
    said_by: str  # what named it: "MODEL", "the job file's model_name_or_path", "the demo"
    claim: str | None = None
    # host: the folder bound when the files link outside `path` (a Hugging Face cache
    # snapshot's files are links to ../../blobs/<hash>): its repo folder; None: `path` itself
    bound: str | None = None

    @property
    def bind(self) -> str:
        """The host folder bound into the containers."""
        return self.bound or self.path

    @property
    def within(self) -> str:
        """`path` inside the bound folder ("" when it is the bound folder)."""
        return Path(self.path).relative_to(self.bind).as_posix() if self.bound else ""

    def describe(self) -> str:
        linked = f", bound from {self.bound}: its files link there" if self.bound else ""
        what = {
            "host": f"{self.path} on this machine{linked}",
            "image": f"{self.path} inside the image",
            "claim": f"{self.path} on claim {self.claim}",
            "demo": "the demo's " + ("tiny model" if self.var == "MODEL" else "data"),
        }
        return f"{what[self.where]} ({self.said_by})"


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
        if src.var == "MODEL":
            root = links_root(path, src.said_by)
            return replace(src, bound=str(root)) if root != path else src
    return src


LINK_DEPTH = 3  # snapshots/<sha> -> models--org--name is 2 up; further is not a model cache


def links_root(folder: Path, said_by: str) -> Path:
    """The folder to bind so that `folder`'s links still resolve in a container: the smallest
    one holding it and every file its links point to. A Hugging Face cache snapshot
    (hub/models--org--name/snapshots/<sha>) links each file to ../../blobs/<hash>: its repo
    folder, models--org--name. Links that reach further up are refused, with the fix."""
    outside = []
    for link in (p for p in folder.rglob("*") if p.is_symlink()):
        target = link.resolve()
        if not target.exists():
            raise HarnessError(
                f"{said_by}={folder}: {link} links to {target}, which does not "
                "exist; fetch the model again (or fix the link)"
            )
        if not target.is_relative_to(folder):
            outside.append(target)
    if not outside:
        return folder
    root = Path(os.path.commonpath([folder, *outside]))
    if len(folder.relative_to(root).parts) > LINK_DEPTH:
        raise HarnessError(
            f"{said_by}={folder}: its files link to {outside[0]}, outside it and far above it "
            f"(the folder holding both is {root}); a container sees only what is bound. Copy "
            f"the model with its links followed (`cp -rL {folder} <new folder>`) and use that"
        )
    return root


def in_job(value: str, job_file: Path | None) -> Path:
    """A path a job file names, as the user meant it: relative to the job file's folder (as a
    path in any config file is), `~` expanded; a flag's is relative to where make runs."""
    path = Path(value).expanduser()
    return path if path.is_absolute() or job_file is None else job_file.parent / path


def for_run(
    var: str, flag: str | None, job: dict, job_file: Path | None, own_image: bool
) -> Source:
    """MODEL or DATA for a run here (up, bench, fault)."""
    key = f"JOB={job_file}'s {KEYS[var]}"
    if flag:
        return _check_kind(Source(var, "host", str(Path(flag).expanduser().resolve()), var))
    value = _job_value(job, var)
    if value is None:
        return Source(var, "demo", IMAGE_ASSETS[var], "the demo: JOB and " + var + " name none")
    if value == IMAGE_ASSETS[var]:
        return Source(var, "image", value, key)
    path = in_job(value, job_file)
    if path.exists():
        return Source(var, "host", str(path.resolve()), key)
    if own_image and path.is_absolute():
        return Source(
            var, "image", value, key + " (not on this machine: taken as a path inside IMAGE)"
        )
    raise HarnessError(
        f"{key} is {value}, which is not on this machine; the ranks read only what is here "
        f"(bound into the containers) or inside the image: set {var}=<local path>, or fix "
        f"{KEYS[var]} in the job file"
    )


def for_cluster(
    var: str, flag: str | None, job: dict, job_file: Path | None, own_image: bool = False
) -> Source:
    """MODEL or DATA for a cluster's pods (kube): a claim or a path inside the image. One rule
    for the flag and the job file's own path: a path on this machine is refused (a pod cannot
    see it), with the fixes; so is a path inside the harness's own image (`own_image`) other
    than its demo's, which that image does not have."""
    if flag:
        src = _cluster_source(var, flag, var, Path(flag).expanduser())
    else:
        value = _job_value(job, var)
        if value is None:
            return Source(var, "demo", IMAGE_ASSETS[var], "the demo: JOB and " + var + " name none")
        said = f"JOB={job_file}'s {KEYS[var]}"
        src = _cluster_source(var, value, said, in_job(value, job_file))
    if own_image and src.where == "image" and src.path != IMAGE_ASSETS[var]:
        raise HarnessError(
            f"{src.said_by}={src.path}: on neither this machine nor a claim, and the harness's "
            f"own image holds only the demo's ({IMAGE_ASSETS[var]}): put it on a "
            f"PersistentVolumeClaim ({var}={CLAIM_PREFIX}<claim>/<path>), or bake it into "
            f"your image and name both (IMAGE=<registry>/<image> {var}={IMAGE_PREFIX}<path>)"
        )
    return src


def _cluster_source(var: str, value: str, said_by: str, here: Path) -> Source:
    """`value` as a pod reads it; `here` is where it would be on this machine."""
    if value.startswith(CLAIM_PREFIX):
        claim, _, sub = value[len(CLAIM_PREFIX) :].lstrip("/").partition("/")
        if not claim or not sub:
            raise HarnessError(
                f"{said_by}={value}: a claim is {CLAIM_PREFIX}<claim>/<path in it>,"
                f" e.g. {var}=pvc:models/granite-3b"
            )
        return Source(var, "claim", sub.strip("/"), said_by, claim=claim)
    explicit = value.startswith(IMAGE_PREFIX)
    path = value[len(IMAGE_PREFIX) :] if explicit else value
    if not explicit and here.exists():
        raise HarnessError(
            f"{said_by}={value} is a path on this machine ({here.resolve()}), and a cluster's "
            f"pods cannot see it: put it on a PersistentVolumeClaim "
            f"({var}={CLAIM_PREFIX}<claim>/<path>) or bake it into the image and name it there "
            f"({var}={IMAGE_PREFIX}/<its path in the image>)"
        )
    if not path.startswith("/"):
        raise HarnessError(
            f"{said_by}={value}: a pod reads a path inside the image, which is absolute "
            f"({var}={IMAGE_PREFIX}/models/x), or a claim: {var}={CLAIM_PREFIX}<claim>/<path>"
        )
    return Source(var, "image", path, said_by)


def rank_path(src: Source, layout: Layout) -> str:
    """The path the ranks read: where a host path is bound (/model, /data/<name>), or a claim
    mounted (the same places), or a path in the image as it is. LAYOUT=host reads host paths
    as they are, and the demo's assets made on the host (lifecycle)."""
    host_assets = {IMAGE_MODEL: HOST_ASSETS / "tiny-model", IMAGE_DATA: HOST_ASSETS / "demo.jsonl"}
    if layout.topology.kind == "host":
        return str(host_assets.get(src.path, src.path))
    if src.where in ("host", "claim"):
        return mount_target(src)
    return src.path


def mount_target(src: Source) -> str:
    """Where a host path is bound, or a claim's path mounted: /model (a model in a linked
    folder: its path under it), /data/<its name>."""
    if src.var == "MODEL":
        return str(PurePosixPath(MODEL_DIR, src.within))
    return data_target(src.path)
