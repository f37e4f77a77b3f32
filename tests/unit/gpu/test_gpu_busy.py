"""A GPU busy with work that is not the harness's, GPUs named by the user, and the GPUs that
LAYOUT=host ranks see (issue 28, part 5), on a box without a GPU: `nvidia-smi` is the stand-in
(gpu_standin.py), which answers the queries as the real tool does. Dry runs start nothing."""

from __future__ import annotations

import sys
import time

import pytest
import yaml

from support import gpu_standin
from support.gpu_standin import H100, device_ids, dry_up, harness, uuid
from tuning.harness.machine.devices import BUSY_MIB

APP = "2:4242:python3:1024"  # GPU 2 runs pid 4242, someone's python3, 1024 MiB


def refused(tmp_path, *args, **env) -> str:
    out = harness(tmp_path, "up", "--dry-run", "--run-id", "t", *args, **env)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "services:" not in out.stdout and not (tmp_path / "runs/t").exists()
    return out.stderr


# --- Busy: compute processes, or memory in use ------------------------------------------------


def test_a_gpu_with_a_compute_process_is_busy(smi, tmp_path):
    err = refused(tmp_path, "--gpus", "8", FAKE_SMI_APPS=APP)
    assert "GPUS=8 but only 7 of the 8 visible GPU(s) are free" in err
    assert "GPU 2 busy: compute process(es) pid 4242 (python3, 1024 MiB)" in err
    assert "name a busy GPU to take it anyway (GPUS=device=i" in err and "GPUS=7" in err
    doc, _ = dry_up(tmp_path, "--gpus", "3", FAKE_SMI_APPS=APP)
    assert device_ids(doc["services"]["trainer"]) == ["0", "1", "3"]
    listed = harness(tmp_path, "gpus", FAKE_SMI_APPS=APP).stdout
    assert f"  2 {uuid(2)} {H100} compute 9.0 (busy: compute process(es) pid 4242" in listed
    # a process whose memory the driver will not give (inside a container, say): still busy
    err = refused(tmp_path, "--gpus", "8", FAKE_SMI_APPS="5:77:/usr/bin/other:N/A")
    assert "GPU 5 busy: compute process(es) pid 77 (/usr/bin/other)" in err


def test_memory_in_use_over_the_threshold_is_busy(smi, tmp_path):
    err = refused(tmp_path, "--gpus", "8", FAKE_SMI_MEM_USED=f"1:{BUSY_MIB + 1},6:30000")
    assert f"GPU 1 busy: {BUSY_MIB + 1} MiB of memory in use (more than {BUSY_MIB} MiB)" in err
    assert "GPU 6 busy: 30000 MiB" in err and "only 6 of the 8" in err
    doc, _ = dry_up(tmp_path, "--gpus", "2", FAKE_SMI_MEM_USED="0:30000,1:30000")
    assert device_ids(doc["services"]["trainer"]) == ["2", "3"]
    # at the threshold, or where the driver says [N/A], a GPU is free
    doc, _ = dry_up(tmp_path, "--gpus", "8", FAKE_SMI_MEM_USED=f"1:{BUSY_MIB},2:N/A")
    assert device_ids(doc["services"]["trainer"]) == [str(i) for i in range(8)]


# --- Named: taken, busy or not ----------------------------------------------------------------


def test_a_gpu_named_in_gpus_is_taken_busy_or_not(smi, tmp_path):
    out = harness(
        tmp_path,
        "up",
        "--dry-run",
        "--run-id",
        "t",
        "--gpus",
        "device=6,2",
        "--layout",
        "per-rank",
        FAKE_SMI_APPS=APP,
        FAKE_SMI_MEM_USED="6:30000",
    )
    assert out.returncode == 0, out.stderr
    doc = next(yaml.safe_load_all(out.stdout))
    assert [device_ids(s) for s in doc["services"].values()] == [["6"], ["2"]]  # as named
    assert "GPU 2 is busy (compute process(es) pid 4242" in out.stderr
    assert "taking it, as you named it" in out.stderr
    doc, _ = dry_up(tmp_path, "--gpus", f"device={uuid(2)}", FAKE_SMI_APPS=APP)
    assert device_ids(doc["services"]["trainer"]) == ["2"]


def test_a_gpu_named_in_cuda_visible_devices_is_taken_busy_or_not(smi, tmp_path):
    doc, _ = dry_up(tmp_path, "--gpus", "2", FAKE_SMI_APPS=APP, CUDA_VISIBLE_DEVICES="2,3")
    assert device_ids(doc["services"]["trainer"]) == ["2", "3"]
    # NVIDIA_VISIBLE_DEVICES is the container runtime's (often every GPU of a node): it hides
    # GPUs, it names none, so the busy one is left out
    doc, _ = dry_up(tmp_path, "--gpus", "2", FAKE_SMI_APPS=APP, NVIDIA_VISIBLE_DEVICES="2,3,4")
    assert device_ids(doc["services"]["trainer"]) == ["3", "4"]


def test_bad_gpu_names_are_refused_with_the_fix(smi, tmp_path):
    err = refused(tmp_path, "--gpus", "device=3,9")
    assert "GPUS=device=3,9: no visible GPU 9; nvidia-smi shows 0 (GPU-" in err
    err = refused(tmp_path, "--gpus", "device=3", CUDA_VISIBLE_DEVICES="4,5")
    assert "no visible GPU 3 (CUDA_VISIBLE_DEVICES=4,5)" in err
    err = refused(tmp_path, "--gpus", "4,5")
    assert "GPUS='4,5' is not a whole number (GPUS=2: that many GPUs), nor GPUs by name" in err
    assert "GPUS=device=4,5" in err
    err = refused(tmp_path, "--gpus", f"device=2,{uuid(2)}")
    assert "names one GPU twice" in err
    out = harness(tmp_path, "kube", "--gpus", "device=1")
    assert out.returncode == 2 and "a cluster's scheduler picks a pod's GPUs" in out.stderr


@pytest.fixture
def other_run_holds_4_5(smi, tmp_path):
    with gpu_standin.other_run_holds(tmp_path, "4,5") as child:
        yield child


def test_naming_a_gpu_another_run_holds_is_still_refused(other_run_holds_4_5, tmp_path):
    err = refused(tmp_path, "--gpus", "device=3,5")
    assert "GPUS=device=3,5 but only 1 of the 2 named GPU(s) are free" in err
    assert f"GPU 5 by run other-run (harness pid {other_run_holds_4_5.pid})" in err


# --- LAYOUT=host: the ranks see the GPUs taken, by UUID -----------------------------------


def test_host_ranks_see_the_gpus_the_run_took_by_uuid(other_run_holds_4_5, tmp_path, monkeypatch):
    from tuning.harness import cli
    from tuning.harness.backends.nodes import HostNodes
    from tuning.harness.flags.run_flags import RunFlags
    from tuning.harness.layout import options
    from tuning.harness.run import render

    # The user's CUDA_VISIBLE_DEVICES (nvidia-smi's indices); 4 and 5 are another run's.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,4,5,6,7")
    a = cli.parser().parse_args(
        ["up", "--layout", "host", "--gpus", "2", "--run-id", "h", "--runs", str(tmp_path / "runs")]
    )
    spec = options.spec_from(RunFlags.of(a))
    assert spec.layout.topology.plan.ids == ("3", "6")
    want = f"{uuid(3)},{uuid(6)}"
    commands = render.node_commands(spec.layout, spec.accelerate_config)
    assert commands["host"]["env"]["CUDA_VISIBLE_DEVICES"] == want
    # The process HostNodes starts has them, not the harness's own CUDA_VISIBLE_DEVICES.
    run_dir = tmp_path / "runs/h"
    (run_dir / "logs").mkdir(parents=True)
    show = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['CUDA_DEVICE_ORDER'])"
    commands["host"]["argv"] = [sys.executable, "-c", show]
    nodes = HostNodes(spec.layout, run_dir, commands)
    nodes.start()
    while nodes.poll()["host"] is None:
        time.sleep(0.1)
    assert (run_dir / "logs/host.log").read_text().split() == [want, "PCI_BUS_ID"]
