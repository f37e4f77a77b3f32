"""benchmarks/mfu.py's report: its Markdown and JSON from a run and a probe, the peak from the
GPU's name (or the flag), and each Compose layout's NCCL transport or why it was skipped (the
FLOPs per token and MFU: test_mfu.py)."""

from __future__ import annotations

import json
import sys

from support.paths import ROOT
from support.run_records import trainer_output

sys.path.insert(0, str(ROOT / "benchmarks"))
import mfu  # noqa: E402


def test_report_markdown_and_json_from_a_run_and_a_probe(tmp_path, llama_1b, capsys):
    run = trainer_output(tmp_path / "run", ranks=1, batch=8, seq=2048)
    probe = {
        "world_size": 1,
        "backend": "nccl",
        "correct": True,
        "samples": [
            {"bytes": 2**20, "algbw_GBps": 100.0, "busbw_GBps": 0.0},
            {"bytes": 2**28, "algbw_GBps": 900.0, "busbw_GBps": 0.0},
        ],
    }
    (tmp_path / "probe.json").write_text(json.dumps(probe))
    (tmp_path / "probe.log").write_text("x NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n")
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n")
    code = mfu.main(
        [
            "--model",
            str(llama_1b),
            "--run",
            str(run),
            "--probe",
            str(tmp_path / "probe.json"),
            "--probe-log",
            str(tmp_path / "probe.log"),
            "--command",
            "benchmarks/gpu_check.sh",
            "--job",
            '{"batch": 8, "words": 1024}',
            "--gpu",
            "NVIDIA A100-SXM4-80GB",
            "--json",
            str(tmp_path / "r.json"),
            "--markdown",
            str(tmp_path / "s.md"),
            "--docs",
            str(docs),
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["train"]["flops_per_token"] == 7_314_370_560
    assert report["train"]["peak_tflops"] == 312  # the A100's dense bf16 peak, from its name
    assert report["train"]["peak_source"] == (
        "A100, dense bf16 (benchmarks/gpu_peaks.py, from 'NVIDIA A100-SXM4-80GB')"
    )
    assert report["probe"]["largest"]["bytes"] == 2**28 and report["probe"]["transport"] == [
        "P2P/IPC"
    ]
    section = (tmp_path / "s.md").read_text()
    assert section.startswith(mfu.BEGIN) and "benchmarks/gpu_check.sh" in section
    assert "1,034,512,384 non-embedding" in section and "busbw 0.0 GB/s" in section
    assert "batch 8 x 2048" in section and "every sequence full" in section
    assert docs.read_text() == "# Benchmarks\n\n" + section
    out = capsys.readouterr().out
    assert "FLOPs/token 7,314,370,560" in out
    # a section put in place elsewhere; a file that is not one is refused
    other = tmp_path / "other.md"
    assert mfu.main(["--section", str(tmp_path / "s.md"), "--docs", str(other)]) == 0
    assert other.read_text() == section
    assert mfu.main(["--section", str(docs.parent / "probe.log"), "--docs", str(other)]) == 1


# --- the peak, from the GPU's name ------------------------------------------------------------
NAMES = {  # names as torch.cuda.get_device_name() / nvidia-smi print them -> dense bf16 TFLOP/s
    "NVIDIA H100 80GB HBM3": 989,
    "NVIDIA H100 PCIe": 756,
    "NVIDIA H100 NVL": 835,
    "NVIDIA H200": 989,
    "NVIDIA GH200 480GB": 989,
    "NVIDIA H800": 989,
    "NVIDIA A100-SXM4-80GB": 312,
    "NVIDIA A100-PCIE-40GB": 312,
    "NVIDIA A100 80GB PCIe": 312,
    "NVIDIA A800 80GB PCIe": 312,
    "NVIDIA A10": 125,
    "NVIDIA L40S": 362,
    "NVIDIA L40": 181,
    "NVIDIA L4": 121,
    "NVIDIA RTX 6000 Ada Generation": 364,
    "NVIDIA GeForce RTX 4090": 165,
    "NVIDIA RTX A6000": 155,
    "NVIDIA B200": 2250,
    "NVIDIA B100": 1750,
    "NVIDIA GB200": 2500,
}


def test_peak_from_the_gpus_name():
    import gpu_peaks

    assert {n: gpu_peaks.peak_for(n)[0] for n in NAMES} == NAMES
    # left out rather than guessed: A10G (not A10), H800 PCIe, H200 NVL, a part never listed
    for name in ("NVIDIA A10G", "NVIDIA H800 PCIe", "NVIDIA H200 NVL", "Tesla V100-SXM2-16GB"):
        assert gpu_peaks.peak_for(name) is None, name
    assert mfu.resolve_peak(500.0, "NVIDIA H200") == (500.0, "given (--peak-tflops)")


def test_unknown_part_needs_the_flag_and_the_flag_always_wins(tmp_path, llama_1b, capsys):
    args = ["--model", str(llama_1b), "--sample", str(tmp_path / "run")]
    assert mfu.main([*args, "--gpu", "NVIDIA A10G"]) == 2
    err = capsys.readouterr().err
    assert "no dense bf16 peak known for the GPU 'NVIDIA A10G'" in err and "--peak-tflops" in err
    assert not (tmp_path / "run").exists()  # refused before anything was written
    # no GPU here and no name: the flag is asked for as well
    assert mfu.main(args) == 2
    assert "pass --gpu NAME or --peak-tflops N" in capsys.readouterr().err
    assert (
        mfu.main(
            [
                *args,
                "--gpu",
                "NVIDIA A10G",
                "--peak-tflops",
                "70",
                "--json",
                str(tmp_path / "r.json"),
            ]
        )
        == 0
    )
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["peak_tflops"] == 70 and r["peak_source"] == "given (--peak-tflops)"
    assert mfu.main([*args, "--gpu", "NVIDIA L40S", "--json", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["peak_tflops"] == 362


def test_gpu_peaks_cli():
    import subprocess

    ok = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/gpu_peaks.py"), "NVIDIA H100 PCIe"],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and ok.stdout == "756 H100 PCIe\n"
    bad = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/gpu_peaks.py"), "NVIDIA A10G"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--peak-tflops" in bad.stderr


def test_report_names_each_compose_layouts_nccl_transport_or_why_skipped(tmp_path, llama_1b):
    from tuning.harness.bench import report

    def rep(name, transport, busbw):
        probe = {
            "backend": "nccl",
            "world_size": 2,
            "samples": [{"bytes": 2**28, "algbw_GBps": busbw, "busbw_GBps": busbw}],
        }
        return {
            "name": name,
            "repeats": [
                {
                    "status": "succeeded",
                    "probe_status": "succeeded",
                    "step_s": [[0.5, 0.5]],
                    "probe": probe,
                    "transport": transport,
                }
            ],
        }

    bench = {
        "layouts": [
            rep("single", ["nccl/P2P/CUMEM"], 120.0),
            rep("per-rank-isolated", ["nccl/NET/Socket"], 2.5),
            rep("per-rank-shared", ["nccl/SHM/direct"], 9.0),
        ]
    }
    bench["derived"] = report.derive(bench)
    (tmp_path / "report.json").write_text(json.dumps(bench))
    run = trainer_output(tmp_path / "run", ranks=1, batch=8, seq=2048)
    base = [
        "--model",
        str(llama_1b),
        "--run",
        str(run),
        "--peak-tflops",
        "989",
        "--command",
        "benchmarks/gpu_check.sh",
        "--markdown",
        str(tmp_path / "s.md"),
    ]
    assert mfu.main([*base, "--layouts", str(tmp_path / "report.json")]) == 0
    section = (tmp_path / "s.md").read_text()
    assert "| single | nccl/P2P/CUMEM | 120.0 | 0.500 s | succeeded |" in section
    assert "| per-rank-isolated | nccl/NET/Socket | 2.5 | 0.500 s | succeeded |" in section
    assert "| per-rank-shared | nccl/SHM/direct | 9.0 | 0.500 s | succeeded |" in section
    assert mfu.main([*base, "--layouts-skipped", "no docker client on PATH"]) == 0
    section = (tmp_path / "s.md").read_text()
    assert "Compose layouts (2 GPUs): skipped: no docker client on PATH." in section
