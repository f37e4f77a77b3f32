"""The images the harness builds: a recipe each, one build path for all of them.

A recipe names its Dockerfile, the locks it installs from and its build arguments. Where a
registry answers, the build starts from BASE_REGISTRY and pip fetches the locked versions;
where none does, from the offline base (docker/base.sh) with a wheelhouse made on the host
(`pip download` of the same locked versions) and no network in the build.

Wheelhouses live in build/wheelhouse/<recipe>/, outside the build context (.dockerignore);
the one a build needs is hard-linked into build/wheels/ just before it, so a CPU build never
sends the GPU wheelhouse (gigabytes of CUDA libraries) to the engine.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import sys
from pathlib import Path

import docker
import docker.errors

from tuning.harness.backends import engine
from tuning.harness.errors import ROOT, HarnessError
from tuning.harness.flags.trainers import FMS_IMAGE
from tuning.harness.layout.layout import Layout
from tuning.harness.machine.image_recipes import Recipe, recipe_for

BASE_OFFLINE = "harness-base:bookworm"
BASE_REGISTRY = "python:3.11-slim-bookworm"
WHEELHOUSES = ROOT / "build/wheelhouse"
STAGED = ROOT / "build/wheels"  # what the Dockerfile COPYs
BUILD_LOCK = ROOT / "build/image-build.lock"


def _files(recipe: Recipe) -> list[Path]:
    named = [recipe.dockerfile, recipe.requirements, *recipe.locks, *recipe.sources]
    out = []
    for rel in named:
        path = ROOT / rel
        out += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [p for p in out if p.suffix != ".pyc" and "__pycache__" not in p.parts]


def digest(recipe: Recipe, files: list[Path] | None = None) -> str:
    """A digest of everything the image is built from, so a change means a (cheap) rebuild."""
    h = hashlib.sha256(recipe.name.encode())
    for path in files or _files(recipe):
        if path.is_file():
            h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def pick_base(c: docker.DockerClient, log=print) -> str:
    """The registry's Python base where it is here or can be pulled; else the offline one."""
    for base in (BASE_REGISTRY, BASE_OFFLINE):
        if engine.image_present(c, base):
            return base
    try:
        log(f"image: pulling {BASE_REGISTRY} ...")
        c.images.pull(BASE_REGISTRY)
        return BASE_REGISTRY
    except docker.errors.DockerException as e:
        log(f"image: cannot pull {BASE_REGISTRY} ({str(e).splitlines()[0][:120]});")
        log(f"image: bootstrapping the offline base {BASE_OFFLINE} from Debian packages")
        engine.run_tool(["bash", str(ROOT / "docker/base.sh"), BASE_OFFLINE])
    return BASE_OFFLINE


def wheelhouse(recipe: Recipe, log=print) -> Path:
    """build/wheelhouse/<recipe>: the locked wheels, downloaded on the host once per lock."""
    where = WHEELHOUSES / recipe.name
    stamp = where / ".lock-digest"
    want = digest(recipe, [ROOT / f for f in (recipe.requirements, *recipe.locks)])
    if stamp.is_file() and stamp.read_text() == want:
        return where
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    log(f"image: making the wheelhouse {where.relative_to(ROOT)} on the host (the locked versions)")
    engine.run_tool(wheelhouse_command(recipe, where))
    stamp.write_text(want)
    return where


def wheelhouse_command(recipe: Recipe, where: Path) -> list[str]:
    """`pip download` of the locked versions on the host (the offline build's wheels)."""
    pins = [a for lock in recipe.locks for a in ("-c", str(ROOT / lock))]
    index = ["--extra-index-url", recipe.torch_index] if recipe.wheels_need_index else []
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "-d",
        str(where),
        *index,
        *pins,
        "-r",
        str(ROOT / recipe.requirements),
    ]


def build_command(recipe: Recipe, tag: str, base: str, want: str) -> list[str]:
    """The `docker build` of `recipe`: offline (from BASE_OFFLINE, the staged wheelhouse) with
    no network; online, pip reads the registry and the recipe's TORCH_INDEX."""
    cmd = [
        "docker",
        "build",
        "-f",
        recipe.dockerfile,
        "-t",
        tag,
        "--build-arg",
        f"BASE_IMAGE={base}",
        "--label",
        f"harness.base={base}",
        "--label",
        f"harness.source={want}",
        "--label",
        f"harness.recipe={recipe.name}",
    ]
    for key, value in recipe.build_args:
        cmd += ["--build-arg", f"{key}={value}"]
    return [*cmd, "--network", "none", "."] if base == BASE_OFFLINE else [*cmd, "."]


def dry_run(tag: str, device: str) -> list[str]:
    """What `make image` would run, both ways: online (a registry answers) and offline."""
    recipe = recipe_for(tag, device)
    want, where = digest(recipe), WHEELHOUSES / recipe.name
    return [
        f"# {tag} (recipe {recipe.name}, CUDA {recipe.cuda or 'none'}); where a registry answers:",
        shlex.join(build_command(recipe, tag, BASE_REGISTRY, want)),
        "# where none does: the wheelhouse on the host, then a build with no network",
        shlex.join(wheelhouse_command(recipe, where)),
        shlex.join(build_command(recipe, tag, BASE_OFFLINE, want)),
    ]


def _stage(source: Path | None) -> None:
    """build/wheels holds exactly `source`'s wheels (hard links), or nothing."""
    shutil.rmtree(STAGED, ignore_errors=True)
    STAGED.mkdir(parents=True)
    (STAGED / ".keep").write_text("the wheelhouse of the image being built (images.py)\n")
    for whl in sorted(source.glob("*.whl")) if source else ():
        try:
            os.link(whl, STAGED / whl.name)
        except OSError:
            shutil.copy2(whl, STAGED / whl.name)


def ensure(c: docker.DockerClient, tag: str, device: str = "cpu", rebuild=False, log=print) -> str:
    """Build `tag` (recipe_for) if it is missing or older than its sources, or when asked.
    Returns the base it was built from. Checked once per harness process: a bench's or fault
    matrix's later runs use the image its first run had, even if the sources change meanwhile
    (an edit during a bench once rebuilt the image between two of its layouts)."""
    if not rebuild and (tag, device) in _CHECKED:
        return _CHECKED[tag, device]
    _CHECKED[tag, device] = base = _ensure(c, tag, device, rebuild, log)
    return base


_CHECKED: dict[tuple[str, str], str] = {}  # (tag, device) -> base, this process's checks


def _ensure(c: docker.DockerClient, tag: str, device: str, rebuild: bool, log) -> str:
    recipe = recipe_for(tag, device)
    want = digest(recipe)
    old = c.images.get(tag) if engine.image_present(c, tag) else None
    if old and not rebuild and old.labels.get("harness.source") == want:
        log(f"image: {tag} present (base {old.labels.get('harness.base', '?')})")
        return old.labels.get("harness.base", "?")
    with _one_build_at_a_time(log):
        if not rebuild and engine.image_present(c, tag):  # built while this one waited?
            now = c.images.get(tag)
            if now.labels.get("harness.source") == want:
                return now.labels.get("harness.base", "?")
        if old:
            log(f"image: {'rebuilding' if rebuild else 'the sources changed; rebuilding'} {tag}")
        return _build(c, recipe, tag, want, old, log)


@contextlib.contextmanager
def _one_build_at_a_time(log):
    """Builds share build/wheels (the staged wheelhouse): two at once, from two harness
    processes, would restage it under each other's feet."""
    BUILD_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(BUILD_LOCK, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log("image: another image build is running here; waiting for it")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _build(c: docker.DockerClient, recipe: Recipe, tag: str, want: str, old, log) -> str:
    base = pick_base(c, log)
    offline = base == BASE_OFFLINE
    _stage(wheelhouse(recipe, log) if offline else None)
    log(f"image: building {tag} ({recipe.name}) FROM {base}" + (" with no network" * offline))
    try:
        engine.run_tool(build_command(recipe, tag, base, want), cwd=ROOT)
    finally:
        _stage(None)  # the links go; the wheelhouse stays for the next build
    if old and old.id != c.images.get(tag).id:
        try:  # the image this build replaced, unless a container still uses it
            c.images.remove(old.id)
        except docker.errors.APIError:
            pass
    return base


def ready(client, layout: Layout, log=print) -> None:
    """The run's image, there to start: a user's (ENTRY) checked, never built from our
    recipes; ours built if it is missing."""
    if layout.trainer.entry:
        check_image(client, layout)
    else:
        ensure(client, layout.topology.plan.image, layout.topology.device, log=log)


def check_image(client, layout: Layout) -> None:
    """A foreign image must be on the engine already (nothing is pulled); the fms one is
    built from docker/fms.Dockerfile when it is missing."""
    image = layout.topology.plan.image
    if image == FMS_IMAGE:
        ensure(client, FMS_IMAGE)
        _prune_build_stages(client)
        return
    if not engine.image_present(client, image):
        raise HarnessError(
            f"IMAGE={image} is not on this engine and nothing is pulled; build it "
            f"(docker build -t {image} ...) or load it (docker load -i FILE) first"
        )


def _prune_build_stages(client) -> None:
    """The fms build stage (venv plus wheels, ~12 GB) stays as the next build's cache; stages
    that a rebuild left behind go. Only images carrying the stage's own label are touched."""
    found = client.images.list(filters={"label": "harness.build-stage=fms", "dangling": True})
    for old in sorted(found, key=lambda i: i.attrs["Created"])[:-1]:
        try:
            client.images.remove(old.id)
        except docker.errors.APIError:
            pass  # still in use (a build running now): the next run tries again
