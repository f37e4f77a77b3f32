"""Tokens/s and MFU of one trainer run, by torchtitan's formula (and the GPU check's report).

    python benchmarks/mfu.py --model MODEL_DIR --run OUTPUT_DIR [--seq-len T]
        [--peak-tflops 989] [--skip-steps 5] [--json FILE]
        [--probe PROBE_JSON] [--probe-log LOG] [--command STR] [--markdown FILE] [--docs FILE]
    python benchmarks/mfu.py --sample DIR     # a made-up run of MODEL_DIR's shape (dry runs)

The formula (torchtitan: ``get_num_params(model, exclude_embedding=True)`` and
``get_num_flop_per_token``; shared/notes/anchors.md):

    N         = parameters - the nn.Embedding modules' (the input embedding; the output layer
                counts, untied; a tied one is the embedding and is left out with it)
    FLOPs/tok = 6 * N + 12 * l * h * q * t    (l layers, h heads, q head dim, t sequence length:
                forward 2 + backward 4 matmuls per weight, x2 for multiply-add; attention's two
                matmuls likewise, causal sparsity not discounted, recomputation not counted)
    MFU       = FLOPs/tok * tokens/s per device / peak FLOP/s per device

N is counted on the meta device from the model's config.json (no weights read, no GPU).
tokens/s is the trainer's own (``train_summary.json``: non-padding tokens of every rank over
the steps after its 2 warm-up steps, divided by the summed step time); a second "steady" figure
skips ``--skip-steps`` from each rank's ``metrics/rank<N>.jsonl``. t is, unless given, the
measured mean of non-padding tokens per sequence (step tokens / samples). The peak defaults to
``PEAK_TFLOPS`` or 989 TFLOP/s (dense bf16, H100 SXM and H200).

With ``--probe`` (the all-reduce probe's probe.json) and ``--command`` it also writes the GPU
check's report: ``--json`` gets everything (machine, probe, run, MFU), ``--markdown`` the
section, and ``--docs`` has that section put in place between this module's markers (appended
the first time, replaced after). ``--section FILE --docs FILE`` only puts a section written
elsewhere (``--markdown`` on the GPU machine) in place.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from pathlib import Path

DEFAULT_PEAK_TFLOPS = 989.0  # dense bf16, H100 SXM / H200 (anchors.md, torchtitan)
DEFAULT_SKIP_STEPS = 5
BEGIN = "<!-- gpu-check:begin (benchmarks/gpu_check.sh writes this section; rerun to replace) -->"
END = "<!-- gpu-check:end -->"
GIB = 1024**3


# ---------------------------------------------------------------------------------------
# The formula (pure)
# ---------------------------------------------------------------------------------------


def flops_per_token(n_nonembedding: int, layers: int, heads: int, head_dim: int, seq_len: int):
    """torchtitan's training FLOPs per token: (6N, attention, their sum)."""
    dense = 6 * n_nonembedding
    attention = 12 * layers * heads * head_dim * seq_len
    return dense, attention, dense + attention


def mfu(flops_per_tok: float, tokens_per_s_per_device: float, peak_flops: float) -> float:
    """Model FLOPs utilisation, a fraction of the peak."""
    if peak_flops <= 0:
        raise ValueError("peak FLOP/s must be positive")
    return flops_per_tok * tokens_per_s_per_device / peak_flops


def attention_dims(config: dict) -> tuple[int, int, int]:
    """(layers, heads, head_dim) from a Hugging Face config.json (llama-like or gpt2)."""
    layers = config.get("num_hidden_layers", config.get("n_layer"))
    heads = config.get("num_attention_heads", config.get("n_head"))
    hidden = config.get("hidden_size", config.get("n_embd"))
    if not (layers and heads and hidden):
        raise ValueError("config.json names no layers / heads / hidden size")
    head_dim = config.get("head_dim") or hidden // heads
    return int(layers), int(heads), int(head_dim)


# ---------------------------------------------------------------------------------------
# The model and the run
# ---------------------------------------------------------------------------------------


def count_params(model_dir: str | Path) -> dict:
    """Parameters of the model in model_dir, built on the meta device from its config."""
    import torch
    from torch import nn
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())  # a tied weight counts once
    embedding = sum(
        p.numel()
        for m in model.modules()
        if isinstance(m, nn.Embedding)
        for p in m.parameters(recurse=False)
    )
    return {"params": total, "embedding": embedding, "non_embedding": total - embedding}


def read_steps(run_dir: str | Path) -> dict[int, list[dict]]:
    """{rank: [step lines in order]} from <run_dir>/metrics/rank<N>.jsonl."""
    out: dict[int, list[dict]] = {}
    for path in sorted(Path(run_dir, "metrics").glob("rank*.jsonl")):
        rank = int(path.stem[4:])
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        out[rank] = [x for x in lines if x.get("event") == "step"]
    return out


def steady_throughput(steps: dict[int, list[dict]], skip: int) -> dict:
    """Tokens/s over the steps after the first `skip`: every rank's tokens of a step, over
    rank 0's step times (the ranks step together)."""
    zero = steps.get(0) or []
    timed = zero[skip:] if len(zero) > skip else []
    if not timed:
        return {"skip_steps": skip, "steps": 0, "tokens_per_s": None, "step_s_median": None}
    wanted = {s["step"] for s in timed}
    tokens = sum(s["tokens"] for rank in steps.values() for s in rank if s["step"] in wanted)
    seconds = sum(s["step_s"] for s in timed)
    return {
        "skip_steps": skip,
        "steps": len(timed),
        "tokens_per_s": tokens / seconds if seconds > 0 else None,
        "step_s_median": statistics.median(s["step_s"] for s in timed),
    }


def measured_seq_len(steps: dict[int, list[dict]]) -> float | None:
    rows = [s for s in steps.get(0) or [] if s.get("samples")]
    if not rows:
        return None
    return sum(s["tokens"] for s in rows) / sum(len(s["samples"]) for s in rows)


def compute(
    model_dir: str | Path,
    run_dir: str | Path,
    seq_len: int | None = None,
    peak_tflops: float = DEFAULT_PEAK_TFLOPS,
    skip: int = DEFAULT_SKIP_STEPS,
    params: dict | None = None,
) -> dict:
    config = json.loads(Path(model_dir, "config.json").read_text())
    layers, heads, head_dim = attention_dims(config)
    params = params or count_params(model_dir)
    summary = json.loads(Path(run_dir, "train_summary.json").read_text())
    steps = read_steps(run_dir)
    measured = measured_seq_len(steps)
    if seq_len is None:
        if measured is None:
            raise ValueError(f"{run_dir}: no step lines with samples; pass --seq-len")
        seq_len, seq_source = round(measured), "measured (mean tokens per sequence)"
    else:
        seq_source = "given"
    dense, attention, per_token = flops_per_token(
        params["non_embedding"], layers, heads, head_dim, seq_len
    )
    world = int(summary.get("world_size") or 1)
    peak = peak_tflops * 1e12
    tps = summary.get("tokens_per_s")
    steady = steady_throughput(steps, skip)
    for part in (steady,):
        t = part["tokens_per_s"]
        part["tokens_per_s_per_device"] = t / world if t else None
        part["mfu"] = mfu(per_token, t / world, peak) if t else None
    memory = [s.get("max_memory_allocated_bytes") for s in steps.get(0) or []]
    memory = [m for m in memory if m is not None]
    return {
        "model": {
            "dir": str(model_dir),
            "model_type": config.get("model_type"),
            "dtype": config.get("dtype", config.get("torch_dtype")),
            "layers": layers,
            "heads": heads,
            "head_dim": head_dim,
            "hidden_size": config.get("hidden_size", config.get("n_embd")),
            "intermediate_size": config.get("intermediate_size"),
            "num_key_value_heads": config.get("num_key_value_heads"),
            "vocab_size": config.get("vocab_size"),
            "tie_word_embeddings": config.get("tie_word_embeddings"),
            **params,
        },
        "seq_len": seq_len,
        "seq_len_source": seq_source,
        "seq_len_measured": measured,
        "flops_per_token": per_token,
        "flops_per_token_dense": dense,
        "flops_per_token_attention": attention,
        "peak_tflops": peak_tflops,
        "world_size": world,
        "status": summary.get("status"),
        "steps": summary.get("steps"),
        "tokens": summary.get("tokens"),
        "tokens_per_s": tps,
        "tokens_per_s_steps": summary.get("tokens_per_s_steps"),
        "tokens_per_s_per_device": tps / world if tps else None,
        "mfu": mfu(per_token, tps / world, peak) if tps else None,
        "steady": steady,
        "first_loss": summary.get("first_loss"),
        "final_loss": summary.get("final_loss"),
        "max_memory_allocated_bytes": max(memory) if memory else None,
    }


def print_result(r: dict, out=None) -> None:
    out = out or sys.stdout
    m = r["model"]
    pct = lambda x: f"{100 * x:.1f}%" if x is not None else "n/a"  # noqa: E731
    num = lambda x: f"{x:,.0f}" if x is not None else "n/a"  # noqa: E731
    print(f"mfu: params {m['params']:,}  non-embedding {m['non_embedding']:,}"
          f"  (embedding {m['embedding']:,})", file=out)  # fmt: skip
    print(f"mfu: FLOPs/token {r['flops_per_token']:,} = 6N {r['flops_per_token_dense']:,}"
          f" + attention {r['flops_per_token_attention']:,}  (l={m['layers']} h={m['heads']}"
          f" q={m['head_dim']} t={r['seq_len']}, {r['seq_len_source']})", file=out)  # fmt: skip
    print(f"mfu: tokens/s {num(r['tokens_per_s'])} ({r['world_size']} device(s),"
          f" {num(r['tokens_per_s_per_device'])} per device, trainer's, {r['tokens_per_s_steps']}"
          f" steps after warm-up)  MFU {pct(r['mfu'])} of {r['peak_tflops']:g} TFLOP/s",
          file=out)  # fmt: skip
    s = r["steady"]
    print(f"mfu: steady (skip {s['skip_steps']}, {s['steps']} steps): tokens/s"
          f" {num(s['tokens_per_s'])}  MFU {pct(s['mfu'])}  step {s['step_s_median']} s median",
          file=out)  # fmt: skip


# ---------------------------------------------------------------------------------------
# The GPU check's report
# ---------------------------------------------------------------------------------------


def machine() -> dict:
    """The GPU (nvidia-smi), torch and CUDA, the libraries, the host."""
    out: dict = {"python": platform.python_version(), "cpus": os.cpu_count(),
                 "kernel": platform.release()}  # fmt: skip
    try:
        res = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
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


_VIA = re.compile(r"NCCL INFO .*?\bvia\s+([A-Za-z0-9_]+(?:/[A-Za-z0-9_]+)?)")


def nccl_transport(log_text: str) -> list[str]:
    """NCCL's transports from an NCCL_DEBUG=INFO log (the bench's parser when importable)."""
    try:
        from tuning.harness.report import parse_nccl_transport
    except ImportError:
        seen: list[str] = []
        for m in _VIA.finditer(log_text):
            if m.group(1) not in seen:
                seen.append(m.group(1))
        return seen
    return parse_nccl_transport(log_text)


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
        "transport": nccl_transport(log_text),
        "samples": samples,
    }


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
        f"| model | random llama (`tuning.tiny_model --size 1b`): {m['layers']} layers, hidden"
        f" {m['hidden_size']}, MLP {m['intermediate_size']}, {m['heads']} heads"
        f" ({m['num_key_value_heads']} KV), vocab {m['vocab_size']}, weights {m['dtype']};"
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
        f"| **MFU** (peak {r['peak_tflops']:g} TFLOP/s bf16) | **{pct(r['mfu'])}** |",
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
    rows = [{"event": "step", "rank": 0, "world_size": 1, "step": i + 1, "loss": 10.0 - i * 0.1,
             "tokens": batch * seq, "step_s": 2.0 if i == 0 else 0.5,
             "samples": list(range(i * batch, (i + 1) * batch))} for i in range(steps)]  # fmt: skip
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
    (run_dir / "train_summary.json").write_text(json.dumps(summary))  # fmt: skip
    return run_dir


# ---------------------------------------------------------------------------------------


def _parse(argv):
    p = argparse.ArgumentParser(prog="python benchmarks/mfu.py", description=__doc__.split("\n")[0])
    p.add_argument("--model", help="model directory (its config.json is read)")
    p.add_argument("--run", help="the trainer's output_dir (train_summary.json, metrics/)")
    p.add_argument("--sample", metavar="DIR", help="write a made-up run to DIR and compute on it")
    p.add_argument("--seq-len", type=int, help="t in the formula (default: measured)")
    p.add_argument("--peak-tflops", type=float,
                   default=float(os.environ.get("PEAK_TFLOPS") or DEFAULT_PEAK_TFLOPS),
                   help="peak per device, TFLOP/s (default: $PEAK_TFLOPS or 989)")  # fmt: skip
    p.add_argument("--skip-steps", type=int, default=DEFAULT_SKIP_STEPS)
    p.add_argument("--json", help="write the result (or, with --command, the report) here")
    p.add_argument("--probe", help="the all-reduce probe's probe.json (report)")
    p.add_argument("--probe-log", help="the probe run's log, NCCL_DEBUG=INFO (report)")
    p.add_argument("--command", help="the command that produced the run (report)")
    p.add_argument("--job", default="{}", help="JSON: the job's batch, words... (report)")
    p.add_argument("--markdown", help="write the report's markdown section here")
    p.add_argument("--docs", help="put the report's section in place in this markdown file")
    p.add_argument("--section", help="with --docs: put this section file in place, nothing else")
    a = p.parse_args(argv)
    if a.section:
        if not a.docs:
            p.error("--section needs --docs")
        return a
    if not a.model:
        p.error("--model is required")
    if bool(a.run) == bool(a.sample):
        p.error("give exactly one of --run or --sample")
    if (a.markdown or a.docs) and not a.command:
        p.error("--markdown and --docs need --command (the report)")
    return a


def main(argv: list[str] | None = None) -> int:
    a = _parse(argv)
    if a.section:
        section = Path(a.section).read_text()
        if not section.startswith(BEGIN) or END not in section:
            print(f"mfu: error: {a.section} is not a GPU check section", file=sys.stderr)
            return 1
        update_docs(a.docs, section)
        print(f"mfu: put {a.section} in place in {a.docs}")
        return 0
    run = a.run or write_sample(a.sample)
    try:
        result = compute(a.model, run, a.seq_len, a.peak_tflops, a.skip_steps)
    except (OSError, ValueError, KeyError) as exc:
        print(f"mfu: error: {exc}", file=sys.stderr)
        return 1
    print_result(result)
    doc: dict = result
    if a.command:
        probe = None
        if a.probe:
            log = Path(a.probe_log).read_text(errors="replace") if a.probe_log else ""
            probe = probe_summary(json.loads(Path(a.probe).read_text()), log)
        doc = {"date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
               "command": a.command, "job": json.loads(a.job), "machine": machine(),
               "probe": probe, "train": result}  # fmt: skip
        section = markdown(doc)
        if a.markdown:
            Path(a.markdown).write_text(section)
        if a.docs:
            update_docs(a.docs, section)
            print(f"mfu: wrote the GPU check's section in {a.docs}")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"mfu: wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
