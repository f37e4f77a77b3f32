"""A stand-in for `nvidia-smi`, for tests on a box without a GPU, and the helpers that run the
harness under it.

The stand-in is a script put first on PATH that answers `-L`, `--query-gpu=FIELDS` and
`--query-compute-apps=FIELDS` (with `--format=csv[,noheader][,nounits]`) in the real tool's
output format: the fields named, in that order, ", " between them, memory in "N MiB", a
field it does not know refused as nvidia-smi refuses it. The GPUs are described by FAKE_SMI_*
variables: count, driver, name, compute capability, MIG on some, memory in use per GPU
(FAKE_SMI_MEM_USED=index:MiB,...) and compute processes (FAKE_SMI_APPS=index:pid:name:MiB,...;
MiB "N/A" as a driver that will not say). FAKE_SMI_FAIL=1 answers as nvidia-smi does on a
driver/library mismatch (NVML's message, exit 18).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from support.paths import ROOT
from tuning.harness.machine import devices

H100 = "NVIDIA H100 80GB HBM3"

NVIDIA_SMI = textwrap.dedent(f"""\
    #!{sys.executable}
    import os, sys
    env = os.environ.get
    if env("FAKE_SMI_FAIL"):
        print("Failed to initialize NVML: Driver/library version mismatch")
        print("NVML library version: 580.95")
        sys.exit(18)
    n = int(env("FAKE_SMI_GPUS", "8"))
    mig = {{int(i) for i in env("FAKE_SMI_MIG", "").split(",") if i}}
    used = dict(x.split(":") for x in env("FAKE_SMI_MEM_USED", "").split(",") if x)  # index:MiB
    apps = [x.split(":") for x in env("FAKE_SMI_APPS", "").split(",") if x]  # index:pid:name:MiB
    name = env("FAKE_SMI_NAME", "{H100}")
    def uuid(i):
        return f"GPU-{{i:08x}}-1111-2222-3333-{{i:012x}}"
    def mib(v):
        return "[N/A]" if v == "N/A" else f"{{v}} MiB"
    def gpu(i):
        return {{"index": str(i), "uuid": uuid(i), "gpu_uuid": uuid(i), "name": name,
                "gpu_name": name, "driver_version": env("FAKE_SMI_DRIVER", "580.95.05"),
                "compute_cap": env("FAKE_SMI_CC", "9.0"),
                "mig.mode.current": "Enabled" if i in mig else "Disabled",
                "memory.used": mib(used.get(str(i), "0")), "memory.total": "81559 MiB",
                "pci.bus_id": f"00000000:{{0x18 + i:02X}}:00.0"}}
    def app(i, pid, pname, mem):
        return {{**gpu(int(i)), "pid": pid, "process_name": pname, "name": pname,
                "used_gpu_memory": mib(mem), "used_memory": mib(mem),
                "gpu_bus_id": gpu(int(i))["pci.bus_id"]}}
    args = sys.argv[1:]
    opts = dict(a.split("=", 1) for a in args if a.startswith("--") and "=" in a)
    if args == ["-L"]:
        for i in range(n):
            print(f"GPU {{i}}: {{name}} (UUID: {{uuid(i)}})")
            if i in mig:
                mig_uuid = f"MIG-{{i:08x}}-aaaa-bbbb-cccc-000000000000"
                print(f"  MIG 1g.10gb     Device  0: (UUID: {{mig_uuid}})")
        sys.exit(0)
    if len(opts) != len(args) or "--format" not in opts or len(opts) != 2:
        print(f"stand-in nvidia-smi: unknown arguments {{args}}", file=sys.stderr)
        sys.exit(2)
    fmt = opts["--format"].split(",")
    if "--query-gpu" in opts:
        fields, rows = opts["--query-gpu"].split(","), [gpu(i) for i in range(n)]
    elif "--query-compute-apps" in opts:
        fields, rows = opts["--query-compute-apps"].split(","), [app(*x) for x in apps]
    else:
        print(f"stand-in nvidia-smi: unknown arguments {{args}}", file=sys.stderr)
        sys.exit(2)
    for field in fields:  # as the real tool refuses a field it does not know
        if rows and field not in rows[0] or not rows and field not in app(0, 0, "", 0):
            print(f'Field "{{field}}" is not a valid field to query.')
            sys.exit(2)
    if "noheader" not in fmt:
        print(", ".join(fields))
    for row in rows:
        values = [row[f] for f in fields]
        if "nounits" in fmt:
            values = [v.removesuffix(" MiB") for v in values]
        print(", ".join(values))
""")


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-2222-3333-{i:012x}"


def install(tmp_path: Path, monkeypatch) -> None:
    """The stand-in nvidia-smi first on PATH (for this process and its children), no
    *_VISIBLE_DEVICES, and GPU locks in a directory of the test's own (a module's `smi`
    fixture, unit/gpu/conftest.py, calls this)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HARNESS_GPU_LOCKS", str(tmp_path / "locks"))
    monkeypatch.setattr(devices.gpu_locks, "LOCK_DIR", tmp_path / "locks")
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


def harness(tmp_path, *args, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuning.harness", *args, "--runs", str(tmp_path / "runs")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )


def dry_up(tmp_path, *args, **env) -> tuple[dict, str]:
    """`up --dry-run`: the Compose file it prints first (its comment lines are YAML comments;
    the job follows, as a document of its own)."""
    out = harness(tmp_path, "up", "--dry-run", "--run-id", "t", *args, **env)
    assert out.returncode == 0, out.stderr
    return next(yaml.safe_load_all(out.stdout)), out.stdout


def device_ids(svc: dict) -> list[str]:
    (dev,) = svc["deploy"]["resources"]["reservations"]["devices"]
    return dev["device_ids"]


HOLD = """
import sys, time
from pathlib import Path
from tuning.harness.machine import gpu_locks
held = gpu_locks.take(sys.argv[2].split(","), "other-run", Path(sys.argv[1]))
print("held", flush=True)
time.sleep(120)
"""


@contextlib.contextmanager
def other_run_holds(tmp_path: Path, gpus: str):
    """Another harness (a process of its own) holding GPUs `gpus` ("0,1") as run other-run, in
    the test's lock folder (`install`'s); yields that process."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "locks"), gpus],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout.readline() == "held\n"
        yield child
    finally:
        child.kill()
        child.wait()
