"""The layout model, its Compose rendering and the launcher's command, checked statically (the
engine's Compose reading every checked-in file: test_layout_docker.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from support.paths import ROOT
from tuning.container import launch
from tuning.harness.backends import compose
from tuning.harness.commands import examples
from tuning.harness.layout.layout import Layout, LayoutError
from tuning.harness.layout.mounts import Mounts
from tuning.harness.layout.topology import Topology
from tuning.harness.machine.devices import GpuPlan
from tuning.harness.machine.image_recipes import IMAGE


def topology(kind: str = "single", gpus: int = 0, **kw) -> Topology:
    """GPUs 0..N-1 of a host not asked, on the default image."""
    return Topology(kind, GpuPlan(gpus, IMAGE), **kw)


def services(kind: str, gpus: int, **kw) -> dict:
    return compose.render(Layout(run_id="t", topology=topology(kind, gpus, **kw)))["services"]


def gpu_ids(svc: dict) -> list[str]:
    (dev,) = svc["deploy"]["resources"]["reservations"]["devices"]
    assert dev["driver"] == "nvidia" and dev["capabilities"] == ["gpu"] and "count" not in dev
    return dev["device_ids"]


def test_single_gets_every_gpu_in_one_service():
    svcs = services("single", 4)
    assert list(svcs) == ["trainer"]
    assert gpu_ids(svcs["trainer"]) == ["0", "1", "2", "3"]
    env = svcs["trainer"]["environment"]
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["WORLD_SIZE"]) == ("1", "4", "4")


def test_per_rank_pins_one_gpu_per_service_and_rendezvous_on_rank0():
    svcs = services("per-rank", 4)
    assert list(svcs) == ["rank0", "rank1", "rank2", "rank3"]
    for i, svc in enumerate(svcs.values()):
        assert gpu_ids(svc) == [str(i)]
        env = svc["environment"]
        assert env["MASTER_ADDR"] == "rank0" and env["PET_NODE_RANK"] == env["RANK"] == str(i)
        assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["WORLD_SIZE"]) == ("4", "1", "4")
        assert svc["labels"]["harness.ranks"] == str(i)


@pytest.mark.parametrize("kind", ["single", "per-rank"])
def test_nccl_needs_shm_and_memlock_and_the_network_is_internal(kind):
    doc = compose.render(
        Layout(run_id="t", topology=topology(kind, 2), mounts=Mounts("/some/runs/t"))
    )
    labels = {"harness.run": "t", "harness.runs": "/some/runs"}  # the run, and its RUNS folder
    for svc in doc["services"].values():
        assert svc["shm_size"] == "2gb"
        assert svc["ulimits"] == {"memlock": -1}
        assert svc["labels"].items() >= labels.items()
        assert svc["cap_drop"] == ["ALL"] and "privileged" not in svc
        assert not any("docker.sock" in v["source"] for v in svc["volumes"])
    assert doc["networks"]["train"] == {"internal": True, "labels": labels}


def test_cpu_ranks_have_no_gpu_reservation():
    for svc in services("per-rank", 0, nproc=3).values():
        assert "deploy" not in svc and svc["environment"]["HARNESS_DEVICE"] == "cpu"
    assert len(services("per-rank", 0, nproc=3)) == 3


def test_per_rank_shared_joins_rank0_namespaces():
    svcs = services("per-rank", 0, network="shared")
    assert svcs["rank0"]["ipc"] == "shareable"
    assert svcs["rank1"]["network_mode"] == "service:rank0"
    assert svcs["rank1"]["ipc"] == "service:rank0"
    assert svcs["rank1"]["environment"]["MASTER_ADDR"] == "127.0.0.1"


@pytest.mark.parametrize(
    "changes, message",
    [({"kind": "ring"}, "LAYOUT='ring'"), ({"gpus": -1}, "GPUS=-1"), ({"nproc": 0}, "NPROC=0")],
)
def test_bad_layouts_say_what_is_wrong(changes, message):
    with pytest.raises(LayoutError, match=message):
        Layout(topology=topology(**changes))


def test_checked_in_examples_equal_the_render():
    for path, text in examples.rendered().items():
        assert path.is_file(), f"{path} missing: run `python -m tuning.harness examples`"
        assert path.read_text() == text, f"{path} is stale: run `python -m tuning.harness examples`"


def test_launcher_single_node():
    env = Layout(run_id="t", topology=topology("single", 4)).nodes()[0].env
    fsdp = str(ROOT / "configs/accelerate/fsdp.yaml")  # the host's copy of /job/accelerate.yaml
    argv, extra = launch.command(env, ["--config", "/job/job.yaml"], fsdp)
    assert argv[:2] == ["accelerate", "launch"]
    flags = dict(zip(argv[2::2], argv[3::2], strict=False))
    assert flags["--num_processes"] == "4" and flags["--num_machines"] == "1"
    assert flags["--config_file"] == "/job/accelerate.yaml"
    assert "--multi_gpu" not in argv and "ACCELERATE_USE_CPU" not in extra
    assert extra["HARNESS_DISTRIBUTED_TYPE"] == "FSDP"
    assert argv[-4:] == ["-m", "tuning.sft_trainer", "--config", "/job/job.yaml"]


def test_launcher_reads_the_pytorchjob_contract():
    # RANK is a NODE rank in a PyTorchJob; the launcher maps it to machine_rank.
    env = {
        "MASTER_ADDR": "job-master-0",
        "MASTER_PORT": "23456",
        "WORLD_SIZE": "2",
        "RANK": "1",
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "1",
    }
    argv, extra = launch.command(env, [])
    i = argv.index
    assert argv[i("--machine_rank") + 1] == "1" and argv[i("--num_processes") + 1] == "2"
    assert argv[i("--main_process_ip") + 1] == "job-master-0"
    assert argv[i("--main_process_port") + 1] == "23456"
    assert argv[i("--rdzv_backend") + 1] == "static" and "--same_network" in argv
    # No GPU device here: the CPU FSDP fixture is chosen by itself, and no --multi_gpu, which
    # would turn it into DDP.
    assert extra["ACCELERATE_USE_CPU"] == "1" and "--multi_gpu" not in argv
    assert argv[argv.index("--config_file") + 1].endswith("configs/accelerate/fsdp-cpu.yaml")
    assert extra["HARNESS_DISTRIBUTED_TYPE"] == "FSDP"


@pytest.mark.parametrize(
    "kind, flag", [("MULTI_CPU", True), ("NO", True), ("MULTI_GPU", False), ("FSDP", False)]
)
def test_launcher_keeps_the_configs_mode_on_cpu(tmp_path, kind, flag):
    # accelerate starts ONE process for MULTI_CPU and NO (accelerate commands/launch.py,
    # simple_launcher): only those get
    # --multi_gpu; FSDP and MULTI_GPU configs keep their own mode.
    cfg = tmp_path / "acc.yaml"
    cfg.write_text(f"distributed_type: {kind}\nnum_processes: 1\n")  # bare NO: YAML false
    argv, extra = launch.command({"HARNESS_DEVICE": "cpu", "ACCELERATE_CONFIG": str(cfg)}, [])
    assert ("--multi_gpu" in argv) is flag and extra["HARNESS_DISTRIBUTED_TYPE"] == kind


def test_launcher_refuses_a_node_rank_outside_the_job():
    with pytest.raises(SystemExit, match="outside PET_NNODES=2"):
        launch.command({"PET_NNODES": "2", "PET_NODE_RANK": "2"}, [])


def test_host_side_never_imports_torch_and_container_side_never_imports_docker():
    host = (
        "import sys, tuning.harness.cli, tuning.harness.bench.report,"
        " tuning.harness.commands.kube, tuning.harness.commands.bench,"
        " tuning.harness.commands.fault; tuning.harness.cli.parser();"
        " assert 'torch' not in sys.modules, 'host side imported torch'"
    )
    box = (
        "import sys, tuning.sft_trainer, tuning.launch, tuning.container.probe,"
        " tuning.container.tiny_model;"
        " assert 'docker' not in sys.modules, 'container side imported docker'"
    )
    for code in (host, box):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr


def test_dry_run_prints_the_file_and_commands_and_starts_nothing(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuning.harness",
            "up",
            "--dry-run",
            "--layout",
            "per-rank",
            "--gpus",
            "0",
            "--nproc",
            "2",
            "--runs",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load(out.stdout.split("\n# ")[0])
    assert set(doc["services"]) == {"rank0", "rank1"}
    assert "# rank1: accelerate launch" in out.stdout and "--machine_rank 1" in out.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_code_change_never_reinstalls_torch():
    # Layers after a changed COPY are rebuilt: the dependency install must come before the
    # code is copied in, and the image must run as its non-root user with one entrypoint.
    lines = [x.strip() for x in (ROOT / "docker/Dockerfile").read_text().splitlines()]
    install = next(i for i, x in enumerate(lines) if "-r /tmp/req/requirements.txt" in x)
    code = lines.index("COPY tuning/ tuning/")
    assert install < code
    assert "USER tuner" in lines and lines[-1].startswith("ENTRYPOINT")
    assert any("python -m tuning.launch" in x.replace('", "', " ") for x in lines)


def test_one_table_names_every_layout():
    """bench, fault, examples and LAYOUT read their names from layout.SHAPES."""
    from tuning.harness.bench import plan
    from tuning.harness.commands import examples, fault, kube
    from tuning.harness.layout import job_layout, layout

    assert layout.KINDS == ("single", "per-rank", "host")
    assert list(plan.LAYOUTS) == ["host", "single", "per-rank-isolated", "per-rank-shared"]
    assert fault.LAYOUTS == examples.KINDS == ("single", "per-rank")
    assert kube.KINDS == ("pytorchjob", "trainjob", "job")
    assert job_layout.JobLayout().topology.kind == "pytorchjob"
