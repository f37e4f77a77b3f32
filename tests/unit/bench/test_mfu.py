"""benchmarks/mfu.py: torchtitan's FLOPs per token, MFU, reading a run, the docs section.

The expected numbers are worked out by hand here, from the architecture, not by the module."""

from __future__ import annotations

import json
import sys

import pytest

from support.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import mfu  # noqa: E402


@pytest.fixture(scope="module")
def llama_1b(tmp_path_factory):
    from tuning.demo_data import corpus
    from tuning.tiny_model import LLAMA_1B, build_config_1b, build_tokenizer

    tok = build_tokenizer(corpus(), model_max_length=LLAMA_1B["max_position_embeddings"])
    out = tmp_path_factory.mktemp("llama1b")
    build_config_1b(tok).save_pretrained(out)  # the config only: counted on the meta device
    return out


def _config(tmp_path, **kw):
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(
        "llama",
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
        max_position_embeddings=128,
        **kw,
    )
    cfg.save_pretrained(tmp_path)
    return tmp_path


def test_1b_llama_flops_per_token_equal_torchtitans_formula_by_hand(llama_1b):
    h, inter, layers, heads, kv, vocab, t = 2048, 5632, 22, 32, 4, 32000, 2048
    head_dim = h // heads
    per_layer = (
        h * h
        + 2 * h * kv * head_dim
        + h * h  # q, k, v, o
        + 3 * h * inter
        + 2 * h
    )  # gate, up, down; two RMSNorms
    embedding = vocab * h
    non_embedding = layers * per_layer + h + vocab * h  # final norm, untied lm_head
    assert non_embedding == 1_034_512_384 and non_embedding + embedding == 1_100_048_384

    n = mfu.count_params(llama_1b)
    assert n == {"params": 1_100_048_384, "embedding": embedding, "non_embedding": non_embedding}
    config = json.loads((llama_1b / "config.json").read_text())
    assert mfu.attention_dims(config) == (layers, heads, head_dim)
    dense, attention, total = mfu.flops_per_token(n["non_embedding"], layers, heads, head_dim, t)
    assert dense == 6 * 1_034_512_384 == 6_207_074_304
    assert attention == 12 * 22 * 32 * 64 * 2048 == 1_107_296_256
    assert total == 7_314_370_560


def test_untied_output_layer_counts_and_a_tied_one_does_not(tmp_path):
    h, inter, layers, kv_dim, vocab = 64, 96, 3, 2 * 16, 100
    body = layers * (2 * h * h + 2 * h * kv_dim + 3 * h * inter + 2 * h) + h
    untied = mfu.count_params(_config(tmp_path / "untied", tie_word_embeddings=False))
    assert untied == {
        "params": body + 2 * vocab * h,
        "embedding": vocab * h,
        "non_embedding": body + vocab * h,
    }
    tied = mfu.count_params(_config(tmp_path / "tied", tie_word_embeddings=True))
    assert tied == {"params": body + vocab * h, "embedding": vocab * h, "non_embedding": body}


def test_mfu_is_flops_times_tokens_per_device_over_peak():
    assert mfu.mfu(7_314_370_560, 50_000, 989e12) == pytest.approx(0.369786, rel=1e-5)
    assert mfu.mfu(1e9, 1e3, 1e12) == pytest.approx(1e-0)
    with pytest.raises(ValueError):
        mfu.mfu(1.0, 1.0, 0)


def _write_run(run, ranks=2, steps=10, batch=4, seq=512, pad=0):
    (run / "metrics").mkdir(parents=True)
    for rank in range(ranks):
        rows = [{"event": "phase", "name": "imports"}] + [
            {
                "event": "step",
                "step": i + 1,
                "tokens": batch * seq - pad,
                "step_s": 3.0 if i < 2 else 0.25,
                "samples": list(range(batch)),
                "max_memory_allocated_bytes": 2**30 * (i + 1),
            }
            for i in range(steps)
        ]
        text = "".join(json.dumps(r) + "\n" for r in rows)
        (run / "metrics" / f"rank{rank}.jsonl").write_text(text)
    summary = {
        "status": "completed",
        "world_size": ranks,
        "steps": steps,
        "tokens_per_s": 12345.0,
        "tokens_per_s_steps": steps - 2,
        "first_loss": 10.4,
        "final_loss": 9.1,
    }
    (run / "train_summary.json").write_text(json.dumps(summary))
    return run


def test_compute_reads_the_trainers_tokens_per_s_and_a_steady_window(tmp_path, llama_1b):
    run = _write_run(tmp_path / "run", ranks=2, batch=4, seq=512)
    r = mfu.compute(llama_1b, run, peak_tflops=989, skip=5)
    assert r["world_size"] == 2 and r["seq_len"] == 512 and r["seq_len_measured"] == 512
    per_token = 6 * 1_034_512_384 + 12 * 22 * 32 * 64 * 512
    assert r["flops_per_token"] == per_token
    assert r["tokens_per_s"] == 12345.0 and r["tokens_per_s_per_device"] == 12345.0 / 2
    assert r["mfu"] == pytest.approx(per_token * 12345.0 / 2 / 989e12)
    s = r["steady"]  # steps 6-10: 2 ranks x 4 x 512 tokens in 0.25 s each
    assert s["steps"] == 5 and s["tokens_per_s"] == pytest.approx(2 * 4 * 512 / 0.25)
    assert s["mfu"] == pytest.approx(per_token * 4 * 512 / 0.25 / 989e12)
    assert s["step_s_median"] == 0.25 and r["max_memory_allocated_bytes"] == 10 * 2**30
    # padding shows in the measured length; a given length is used as given
    padded = mfu.compute(
        llama_1b, _write_run(tmp_path / "p", ranks=1, pad=8), peak_tflops=989, skip=5
    )
    assert padded["seq_len_measured"] == 510 and padded["seq_len"] == 510
    assert (
        mfu.compute(llama_1b, run, seq_len=1024, peak_tflops=989, skip=5)["seq_len_source"]
        == "given"
    )


def test_docs_section_is_appended_once_then_replaced_in_place(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nintro\n")
    first = f"{mfu.BEGIN}\n## GPU check\nold numbers\n{mfu.END}\n"
    mfu.update_docs(doc, first)
    assert doc.read_text() == "# Benchmarks\n\nintro\n\n" + first
    doc.write_text(doc.read_text() + "\n## Later section\nkept\n")
    mfu.update_docs(doc, first.replace("old", "new"))
    text = doc.read_text()
    assert text.count(mfu.BEGIN) == 1 and "new numbers" in text and "old numbers" not in text
    assert text.startswith("# Benchmarks\n\nintro\n") and text.endswith("## Later section\nkept\n")


def test_report_markdown_and_json_from_a_run_and_a_probe(tmp_path, llama_1b, capsys):
    run = _write_run(tmp_path / "run", ranks=1, batch=8, seq=2048)
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
    from tuning.harness.commands.bench import report

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
    run = _write_run(tmp_path / "run", ranks=1, batch=8, seq=2048)
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
