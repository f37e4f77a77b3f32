"""A stand-in for `nvidia-smi`, for tests on a box without a GPU, and the helpers that run the
harness under it.

The stand-in is a script put first on PATH that answers the two command lines the harness
runs (`--query-gpu=...` and `-L`) in the real tool's output format, for GPUs described by
FAKE_SMI_* variables (count, driver, name, compute capability, MIG on some); FAKE_SMI_FAIL=1
answers as nvidia-smi does on a driver/library mismatch (NVML's message, exit 18).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from tuning.harness.spec import devices

ROOT = Path(__file__).resolve().parents[1]
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
    def uuid(i):
        return f"GPU-{{i:08x}}-1111-2222-3333-{{i:012x}}"
    args = sys.argv[1:]
    query = "--query-gpu=index,uuid,name,driver_version,compute_cap,mig.mode.current"
    if sorted(args) == sorted(["--format=csv,noheader", query]):
        for i in range(n):
            print(f"{{i}}, {{uuid(i)}}, {{env('FAKE_SMI_NAME', '{H100}')}}, "
                  f"{{env('FAKE_SMI_DRIVER', '580.95.05')}}, {{env('FAKE_SMI_CC', '9.0')}}, "
                  f"{{'Enabled' if i in mig else 'Disabled'}}")
    elif args == ["-L"]:
        for i in range(n):
            print(f"GPU {{i}}: {{env('FAKE_SMI_NAME', '{H100}')}} (UUID: {{uuid(i)}})")
            if i in mig:
                mig_uuid = f"MIG-{{i:08x}}-aaaa-bbbb-cccc-000000000000"
                print(f"  MIG 1g.10gb     Device  0: (UUID: {{mig_uuid}})")
    else:
        print(f"stand-in nvidia-smi: unknown arguments {{args}}", file=sys.stderr)
        sys.exit(2)
""")


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-2222-3333-{i:012x}"


def install(tmp_path: Path, monkeypatch) -> None:
    """The stand-in nvidia-smi first on PATH (for this process and its children), no
    *_VISIBLE_DEVICES, and GPU locks in a directory of the test's own (a module's `smi`
    fixture calls this)."""
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
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )  # fmt: skip


def dry_up(tmp_path, *args, **env) -> tuple[dict, str]:
    """`up --dry-run`: the Compose file it prints (its comment lines are YAML comments)."""
    out = harness(tmp_path, "up", "--dry-run", "--run-id", "t", *args, **env)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout), out.stdout


def device_ids(svc: dict) -> list[str]:
    (dev,) = svc["deploy"]["resources"]["reservations"]["devices"]
    return dev["device_ids"]
