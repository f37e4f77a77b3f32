"""Shared fixtures for the trainer tests: a tiny model per architecture, demo data, a launcher."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
ACCELERATE = str(Path(sys.executable).with_name("accelerate"))
CPU_CONFIG = ROOT / "configs" / "accelerate" / "cpu.yaml"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Builds tiny models on demand, once per session: tiny_models("gpt2") -> Path."""
    from tuning.tiny_model import build

    root = tmp_path_factory.mktemp("models")
    made: dict[str, Path] = {}

    def get(arch: str = "llama") -> Path:
        if arch not in made:
            made[arch] = build(root / arch, arch=arch, seed=0)
        return made[arch]

    return get


@pytest.fixture(scope="session")
def tiny_model(tiny_models) -> Path:
    return tiny_models("llama")


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory) -> Path:
    from tuning.demo_data import write

    return write(tmp_path_factory.mktemp("data") / "demo.jsonl", n=512, seed=0)


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_cmd(trainer_args: list[str], nproc: int = 2) -> list[str]:
    """The two-rank CPU recipe: MULTI_GPU fixture + ACCELERATE_USE_CPU=1 (see cpu.yaml)."""
    return [
        ACCELERATE,
        "launch",
        "--config_file",
        str(CPU_CONFIG),
        "--num_processes",
        str(nproc),
        "--num_machines",
        "1",
        "--machine_rank",
        "0",
        "--main_process_ip",
        "127.0.0.1",
        "--main_process_port",
        str(free_port()),
        "--rdzv_backend",
        "static",
        "--same_network",
        "-m",
        "tuning.sft_trainer",
        *trainer_args,
    ]


def launch_env(**extra) -> dict:
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_launch(trainer_args: list[str], timeout: float = 300, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        launch_cmd(trainer_args),
        cwd=ROOT,
        env=launch_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_table(path: Path, rows: list[dict]) -> Path:
    """rows as Parquet, or as an Arrow stream (what datasets' save_to_disk writes), by suffix."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows)
    if path.suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    return path


def read_metrics(output_dir: Path, rank: int) -> list[dict]:
    path = Path(output_dir) / "metrics" / f"rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def step_losses(output_dir: Path, rank: int) -> dict[int, float]:
    """step -> loss; when a run was resumed in the same directory the latest line wins."""
    return {r["step"]: r["loss"] for r in read_metrics(output_dir, rank) if r["event"] == "step"}


@pytest.fixture
def mounted(tmp_path) -> tuple[Path, dict]:
    """The rank recorder as Compose mounts it in a user's image (harness_rank.py with the
    modules it loads beside it), and a foreign trainer module that writes a marker file when it
    runs (a test may replace user/foreign_trainer.py)."""
    from tuning.harness.spec.container import BESIDE_RECORDER

    launch_dir, user = tmp_path / "opt-harness-launch", tmp_path / "user"
    launch_dir.mkdir()
    user.mkdir()
    shutil.copy(ROOT / "tuning/rank/rank_record.py", launch_dir / "harness_rank.py")
    for name in BESIDE_RECORDER:  # as Compose mounts them
        shutil.copy(ROOT / "tuning/rank" / name, launch_dir / name)
    marker = tmp_path / "trained"
    (user / "foreign_trainer.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    env = {
        **os.environ,
        "PYTHONPATH": f"{launch_dir}{os.pathsep}{user}",
        "HARNESS_WRAPPED_ENTRY": "foreign_trainer",
        "HARNESS_OUTPUT_DIR": str(tmp_path / "out"),
        "RANK": "0",
        "WORLD_SIZE": "1",
    }
    return marker, env


def recorder(env: dict, device: str) -> subprocess.CompletedProcess:
    """The mounted recorder run as `accelerate launch` runs it in a rank: -m harness_rank."""
    return subprocess.run(
        [sys.executable, "-m", "harness_rank"],
        capture_output=True,
        text=True,
        env={**env, "HARNESS_DEVICE": device},
        timeout=120,
    )


# --- Container tests -------------------------------------------------------------------------
# They never skip: with no engine they fail and say why (CI must prove the containers).
# A quick inner loop deselects them: pytest -m "not docker".


@pytest.fixture(scope="session")
def harness_image() -> str:
    """The harness image, built through the same path `make up` takes if it is missing."""
    out = subprocess.run(
        [PYTHON, "-m", "tuning.harness", "image"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, f"the harness image is not available:\n{out.stdout}{out.stderr}"
    return "tuning-harness:latest"


@pytest.fixture(scope="session")
def fms_image() -> str:
    """fms's image, built through the same path `make up TRAINER=fms` takes if missing."""
    out = subprocess.run(
        [PYTHON, "-m", "tuning.harness", "image", "--trainer", "fms"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, f"the fms image is not available:\n{out.stdout}{out.stderr}"
    return "tuning-harness-fms:latest"


def harness(*args: str, runs: Path, timeout: float = 600, env: dict | None = None):
    """Run `python -m tuning.harness ARGS --runs RUNS` as a user would; returns the process."""
    return subprocess.run(
        [PYTHON, "-m", "tuning.harness", *args, "--runs", str(runs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def wait_training(runs: Path, run_id: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Until every rank has logged a step (so every rank is up and training)."""
    metrics = runs / run_id / "output/metrics"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        files = list(metrics.glob("rank*.jsonl"))
        if len(files) == 2 and all('"event": "step"' in f.read_text() for f in files):
            return
        time.sleep(0.5)
    raise AssertionError("ranks never started training")


def leftovers(run_id: str | None = None, runs: Path | None = None) -> list[str]:
    """Containers, networks and volumes labelled by the harness (for one run, or any; of the
    RUNS folder `runs`, or of any)."""
    label = f"harness.run={run_id}" if run_id else "harness.run"
    also = ["--filter", f"label=harness.runs={Path(runs).resolve()}"] if runs else []
    found = []
    for kind in ("container", "network", "volume"):
        extra = ["-a"] if kind == "container" else []
        out = subprocess.run(
            ["docker", kind, "ls", *extra, "-q", "--filter", f"label={label}", *also],
            capture_output=True,
            text=True,
            check=True,
        )
        found += [f"{kind} {x}" for x in out.stdout.split()]
    return found


_skipped_docker: list[str] = []
# What a machine may truly lack, said in the skip's reason: the kernel's sch_netem (delay and
# loss; no other qdisc delays packets, tbf only shapes). Any other skipped container test is red.
MACHINE_LIMITS = ("netem not supported by this kernel",)


def pytest_runtest_logreport(report):
    if report.skipped and "docker" in report.keywords:
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
        if not any(limit in reason for limit in MACHINE_LIMITS):
            _skipped_docker.append(report.nodeid)


def pytest_configure(config):
    # Every process a test starts inherits this: one that outlives the session is found by it.
    os.environ["HARNESS_TEST_SESSION"] = f"{os.getpid()}-{time.time_ns()}"


def strays() -> dict[int, str]:
    """Processes this session started that are still alive: pid -> its command line and the
    test that started it. /proc/<pid>/environ is the environment a process started with, so
    pytest and what ran it (set before pytest_configure) never carry the marker."""
    mine = f"HARNESS_TEST_SESSION={os.environ['HARNESS_TEST_SESSION']}".encode()
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone, or not ours to read
            continue
        if mine in env:
            test = next(
                (
                    e.split(b"=", 1)[1].decode()
                    for e in env
                    if e.startswith(b"PYTEST_CURRENT_TEST=")
                ),
                "?",
            )
            found[int(d.name)] = f"{cmd.strip()[:120]} (from {test})"
    return found


def no_strays(session) -> None:
    """Nothing a test started may outlive the session (a killed torchrun agent once left its two
    hung ranks running after CI): name them, kill them, and the run is red."""
    deadline = time.monotonic() + 10  # time to finish exiting
    while (found := strays()) and time.monotonic() < deadline:
        time.sleep(0.5)
    if not found:
        return
    print(f"\n{len(found)} process(es) outlived the tests that started them (killed now):")
    for pid, what in found.items():
        print(f"  pid {pid}: {what}")
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    session.exitstatus = 1


_container_basetemp: list[Path] = []  # set once a container test ran: its runs live under it


@pytest.fixture(autouse=True)
def _note_container_tests(request, tmp_path_factory):
    if request.node.get_closest_marker("docker") and not _container_basetemp:
        _container_basetemp.append(tmp_path_factory.getbasetemp())


def no_leftover_runs(session) -> None:
    """Runs of this session's tests (RUNS under its base temp) left on the engine: a test
    leaked them. Named, removed (only those: tests remove only what they started), red."""
    import own_runs

    left = own_runs.sweep(_container_basetemp[0]) if _container_basetemp else []
    if left:
        print(f"\n{len(left)} thing(s) of this session's runs left on the engine (removed now):")
        print("\n".join(f"  {x}" for x in left))
        session.exitstatus = 1


def pytest_sessionfinish(session, exitstatus):
    no_strays(session)
    no_leftover_runs(session)
    # In CI the container tests are the point: one skipped is a red run, not a green one,
    # unless the machine lacks what it needs (MACHINE_LIMITS; -ra shows each skip's reason).
    if os.environ.get("CI") and _skipped_docker and exitstatus == 0:
        print(f"\nCI: {len(_skipped_docker)} container test(s) skipped: {_skipped_docker}")
        session.exitstatus = 1
