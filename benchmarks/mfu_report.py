"""benchmarks/mfu.py's reports: the console lines, and the GPU check's (benchmarks/gpu_check.sh
-> mfu.py --command ...): the machine, the probe's summary and NCCL's transport, the markdown
section, putting it in place in docs/benchmarks.md between BEGIN and END; and the made-up run
the dry run reports on."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from tuning.container.shared.transport import parse_nccl_transport

BEGIN = "<!-- gpu-check:begin (benchmarks/gpu_check.sh writes this section; rerun to replace) -->"
END = "<!-- gpu-check:end -->"
GIB = 1024**3


def print_result(r: dict, out=None) -> None:
    out = out or sys.stdout
    m = r["model"]
    pct = lambda x: f"{100 * x:.1f}%" if x is not None else "n/a"  # noqa: E731
    num = lambda x: f"{x:,.0f}" if x is not None else "n/a"  # noqa: E731
    print(
        f"mfu: params {m['params']:,}  non-embedding {m['non_embedding']:,}"
        f"  (embedding {m['embedding']:,})",
        file=out,
    )
    print(
        f"mfu: FLOPs/token {r['flops_per_token']:,} = 6N {r['flops_per_token_dense']:,}"
        f" + attention {r['flops_per_token_attention']:,}  (l={m['layers']} h={m['heads']}"
        f" q={m['head_dim']} t={r['seq_len']}, {r['seq_len_source']})",
        file=out,
    )
    print(
        f"mfu: tokens/s {num(r['tokens_per_s'])} ({r['world_size']} device(s),"
        f" {num(r['tokens_per_s_per_device'])} per device, trainer's, {r['tokens_per_s_steps']}"
        f" steps after warm-up)  MFU {pct(r['mfu'])} of {r['peak_tflops']:g} TFLOP/s",
        file=out,
    )
    s = r["steady"]
    print(
        f"mfu: steady (skip {s['skip_steps']}, {s['steps']} steps): tokens/s"
        f" {num(s['tokens_per_s'])}  MFU {pct(s['mfu'])}  step {s['step_s_median']} s median",
        file=out,
    )


def machine() -> dict:
    """The GPU (nvidia-smi), torch and CUDA, the libraries, the host."""
    out: dict = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
    }
    try:
        res = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        keys = ("name", "driver", "memory")
        out["gpus"] = [
            dict(zip(keys, (f.strip() for f in line.split(",")), strict=False))
            for line in res.stdout.strip().splitlines()
        ]
    except (OSError, subprocess.SubprocessError):
        out["gpus"] = []
    for name in ("torch", "transformers", "accelerate"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = None
    try:
        import torch

        out["cuda"] = torch.version.cuda
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None
    except Exception:  # noqa: BLE001 (a CPU build, or no driver: recorded as unknown)
        out.setdefault("cuda", None)
        out["nccl"] = None
    return out


def probe_summary(probe: dict, log_text: str = "") -> dict:
    samples = probe.get("samples") or []
    largest = max(samples, key=lambda s: s["bytes"]) if samples else None
    best = max(samples, key=lambda s: s["algbw_GBps"]) if samples else None
    return {
        "world_size": probe.get("world_size"),
        "backend": probe.get("backend"),
        "correct": probe.get("correct"),
        "largest": largest,
        "best_algbw": best,
        "transport": parse_nccl_transport(log_text),
        "samples": samples,
    }


def layouts(report_json: str | None, skipped: str | None) -> dict:
    """The Compose layouts' part: from the bench's report.json (`make bench GPUS=2`), per layout
    NCCL's transport (its channel lines), busbw at the largest size and the steady step; or why
    they were not run."""
    if not report_json:
        return {"skipped": skipped or "not run"}
    bench = json.loads(Path(report_json).read_text())
    derived = bench.get("derived") or {}
    out = []
    for lay in bench.get("layouts") or []:
        d = (derived.get("layouts") or {}).get(lay["name"]) or {}
        reps = lay.get("repeats") or []
        out.append(
            {
                "name": lay["name"],
                "transport": d.get("transport") or [],
                "busbw_GBps": d.get("busbw_largest_GBps"),
                "step_s": (d.get("step_s") or {}).get("median"),
                "status": sorted(
                    {r.get(k) for r in reps for k in ("status", "probe_status") if r.get(k)}
                ),
            }
        )
    return {"report": str(report_json), "layouts": out}


def _layout_lines(part: dict) -> list[str]:
    if "layouts" not in part:
        return ["", f"Compose layouts (2 GPUs): skipped: {part['skipped']}."]
    bench = "`make bench GPUS=2 REPEAT=1 STEPS=5`"
    lines = [
        "",
        f"Compose layouts, 2 GPUs ({bench}: {part['report']})",
        "",
        "| layout | NCCL transport | busbw at largest (GB/s) | step s | status |",
        "| --- | --- | --- | --- | --- |",
    ]
    for x in part["layouts"]:
        busbw = "n/a" if x["busbw_GBps"] is None else f"{x['busbw_GBps']:.1f}"
        lines.append(
            f"| {x['name']} | {', '.join(x['transport']) or 'n/a'} | {busbw} | "
            f"{_s(x['step_s'])} | {', '.join(x['status']) or '?'} |"
        )
    return lines


def _s(x):
    return f"{x:.3f} s" if x is not None else "n/a"


def _gib(x):
    return f"{x / GIB:.1f} GiB" if x else "n/a"


def markdown(report: dict) -> str:
    r, mach, p = report["train"], report["machine"], report.get("probe")
    m, s = r["model"], r["steady"]
    gpu = ", ".join(f"{g.get('name')} ({g.get('memory')})" for g in mach.get("gpus") or []) or "?"
    driver = (mach.get("gpus") or [{}])[0].get("driver", "?")
    pct = lambda x: f"{100 * x:.1f} %" if x is not None else "n/a"  # noqa: E731
    num = lambda x: f"{x:,.0f}" if x is not None else "n/a"  # noqa: E731
    job = report.get("job") or {}
    measured = r.get("seq_len_measured")
    fill = (
        "every sequence full, no padding"
        if measured == r["seq_len"]
        else f"mean {measured:.1f} non-padding tokens per sequence"
        if measured
        else "tokens per sequence not recorded"
    )
    lines = [
        BEGIN,
        "## GPU check: one GPU, FSDP, bf16, a 1B-class llama",
        "",
        f"Measured {report['date']} by `benchmarks/gpu_check.sh` on {gpu}, driver {driver};"
        f" torch {mach.get('torch')} (CUDA {mach.get('cuda')}, NCCL {mach.get('nccl')}),"
        f" transformers {mach.get('transformers')}, accelerate {mach.get('accelerate')},"
        f" Python {mach.get('python')}, {mach.get('cpus')} CPUs. Host layout (no container),"
        " through the image's launcher (`python -m tuning.launch` -> `accelerate launch`),"
        " fms's FSDP defaults (`configs/accelerate/fsdp.yaml`, FSDP1, FULL_SHARD).",
        "",
        "```",
        report["command"],
        "```",
        "",
        "| what | value |",
        "| --- | --- |",
        "| model | random llama (`tuning.container.tiny_model --size 1b`): "
        f"{m['layers']} layers, hidden {m['hidden_size']}, MLP {m['intermediate_size']},"
        f" {m['heads']} heads ({m['num_key_value_heads']} KV), vocab {m['vocab_size']},"
        f" weights {m['dtype']};"
        f" {m['params']:,} parameters, {m['non_embedding']:,} non-embedding |",
        f"| job | {r['world_size']} rank(s), batch {job.get('batch', '?')} x"
        f" {r['seq_len']} tokens per rank, {r['steps']} steps, torch_dtype bfloat16"
        f" (bf16 weights, grads and AdamW states; mixed_precision no, as fms), no gradient"
        f" checkpointing, transformers' default attention; demo data, `--words"
        f" {job.get('words', '?')}` ({fill}) |",
        f"| FLOPs per token (torchtitan) | 6N {r['flops_per_token_dense']:.4g} + attention"
        f" 12·l·h·q·t {r['flops_per_token_attention']:.4g} = {r['flops_per_token']:.4g} |",
        f"| tokens/s (trainer's train_summary, {r['tokens_per_s_steps']} steps after 2 warm-up)"
        f" | {num(r['tokens_per_s'])} ({num(r['tokens_per_s_per_device'])} per GPU) |",
        f"| **MFU** (peak {r['peak_tflops']:g} TFLOP/s: {r.get('peak_source', 'given')}) |"
        f" **{pct(r['mfu'])}** |",
        f"| steady (first {s['skip_steps']} steps skipped, {s['steps']} steps) | tokens/s"
        f" {num(s['tokens_per_s'])}, MFU {pct(s['mfu'])}, step {_s(s['step_s_median'])} median |",
        f"| peak GPU memory (allocated) | {_gib(r['max_memory_allocated_bytes'])} |",
        f"| loss, first -> final | {r['first_loss']:.3f} -> {r['final_loss']:.3f} |"
        if r.get("first_loss") is not None and r.get("final_loss") is not None
        else "| loss | n/a |",
    ]
    if p:
        big = p.get("largest") or {}
        n = p.get("world_size")
        note = " (one rank: busbw = algbw x 2(n-1)/n is 0 by definition)" if n == 1 else ""
        lines.append(
            f"| all-reduce probe ({n} rank(s), {p.get('backend')}, fp32, sums"
            f" {'verified' if p.get('correct') else 'WRONG'}) | at {big.get('bytes', 0) / 2**20:g}"
            f" MiB: algbw {big.get('algbw_GBps', 0):.1f} GB/s, busbw {big.get('busbw_GBps', 0):.1f}"
            f" GB/s{note}; transport: {', '.join(p.get('transport') or []) or 'none named'} |"
        )
    if report.get("layouts"):
        lines += _layout_lines(report["layouts"])
    lines += [
        "",
        "Machine-readable: `gpu_check.json` in the script's output directory (every probe"
        " size, the run's figures, the machine).",
        END,
    ]
    return "\n".join(lines) + "\n"


def update_docs(path: str | Path, section: str) -> None:
    """Put `section` (BEGIN ... END) in place in the markdown file: replace the old one, or
    append it; everything else in the file stays as it was."""
    path = Path(path)
    text = path.read_text() if path.exists() else ""
    start, end = text.find(BEGIN), text.find(END)
    if start != -1 and end != -1 and end > start:
        text = text[:start] + section.rstrip("\n") + text[end + len(END) :]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section
    path.write_text(text if text.endswith("\n") else text + "\n")


# ---------------------------------------------------------------------------------------
# A sample run (the dry run computes on it)
# ---------------------------------------------------------------------------------------


def write_sample(run_dir: str | Path, steps: int = 10, batch: int = 8, seq: int = 2048) -> Path:
    """A made-up run: train_summary.json and rank0.jsonl, 1 rank, 0.5 s steps."""
    run_dir = Path(run_dir)
    (run_dir / "metrics").mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "event": "step",
            "rank": 0,
            "world_size": 1,
            "step": i + 1,
            "loss": 10.0 - i * 0.1,
            "tokens": batch * seq,
            "step_s": 2.0 if i == 0 else 0.5,
            "samples": list(range(i * batch, (i + 1) * batch)),
        }
        for i in range(steps)
    ]
    (run_dir / "metrics/rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    timed = rows[2:]
    summary = {
        "status": "completed",
        "world_size": 1,
        "steps": steps,
        "tokens": batch * seq * steps,
        "first_loss": rows[0]["loss"],
        "final_loss": rows[-1]["loss"],
        "tokens_per_s_steps": len(timed),
        "tokens_per_s": sum(r["tokens"] for r in timed) / sum(r["step_s"] for r in timed),
    }
    (run_dir / "train_summary.json").write_text(json.dumps(summary))
    return run_dir
