"""Tokens/s and MFU of one trainer run, by torchtitan's formula (and the GPU check's report).

    python benchmarks/mfu.py --model MODEL_DIR --run OUTPUT_DIR [--seq-len T]
        [--gpu NAME | --peak-tflops N] [--skip-steps 5] [--json FILE]
        [--probe PROBE_JSON] [--probe-log LOG] [--command STR] [--markdown FILE] [--docs FILE]
    python benchmarks/mfu.py --sample DIR     # a made-up run of MODEL_DIR's shape (dry runs)

The formula (torchtitan: ``get_num_params(model, exclude_embedding=True)`` and
``get_num_flop_per_token``, as torchtitan defines them):

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
measured mean of non-padding tokens per sequence (step tokens / samples). The peak per device:
``--peak-tflops`` (or ``PEAK_TFLOPS``) always wins; else the dense bf16 peak of the GPU named by
``--gpu`` (else torch's name of device 0) from benchmarks/gpu_peaks.py's table. A part not in
the table exits 2, naming the part and the flag.

With ``--probe`` (the all-reduce probe's probe.json) and ``--command`` it also writes the GPU
check's report: ``--json`` gets everything (machine, probe, run, MFU), ``--markdown`` the
section, and ``--docs`` has that section put in place between this module's markers (appended
the first time, replaced after). ``--section FILE --docs FILE`` only puts a section written
elsewhere (``--markdown`` on the GPU machine) in place. The report's parts: mfu_report.py; the
formula's: mfu_formula.py.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
from pathlib import Path

import mfu_report
from gpu_peaks import resolve_peak
from mfu_formula import attention_dims, count_params, flops_per_token, mfu  # also mfu.*
from mfu_report import BEGIN, END, update_docs  # also reached as mfu.*

DEFAULT_SKIP_STEPS = 5


# ---------------------------------------------------------------------------------------
# The run (the formula, pure, and the parameter count: mfu_formula.py)
# ---------------------------------------------------------------------------------------


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
    *,
    peak_tflops: float,
    skip: int = DEFAULT_SKIP_STEPS,
    params: dict | None = None,
    peak_source: str = "given",
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
        "peak_source": peak_source,
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


# ---------------------------------------------------------------------------------------


def _parse(argv):
    p = argparse.ArgumentParser(prog="python benchmarks/mfu.py", description=__doc__.split("\n")[0])
    p.add_argument("--model", help="model directory (its config.json is read)")
    p.add_argument("--run", help="the trainer's output_dir (train_summary.json, metrics/)")
    p.add_argument("--sample", metavar="DIR", help="write a made-up run to DIR and compute on it")
    p.add_argument("--seq-len", type=int, help="t in the formula (default: measured)")
    env_peak = os.environ.get("PEAK_TFLOPS")
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=float(env_peak) if env_peak else None,
        help="peak per device, dense bf16 TFLOP/s; always wins (default: "
        "$PEAK_TFLOPS, else the table's figure for --gpu)",
    )
    p.add_argument(
        "--gpu",
        help="the GPU's name, as nvidia-smi or torch gives it (default: torch's name of device 0)",
    )
    p.add_argument("--skip-steps", type=int, default=DEFAULT_SKIP_STEPS)
    p.add_argument("--json", help="write the result (or, with --command, the report) here")
    p.add_argument("--probe", help="the all-reduce probe's probe.json (report)")
    p.add_argument("--probe-log", help="the probe run's log, NCCL_DEBUG=INFO (report)")
    p.add_argument("--command", help="the command that produced the run (report)")
    p.add_argument("--layouts", help="the Compose layouts' bench report.json (report)")
    p.add_argument("--layouts-skipped", help="why the Compose layouts did not run (report)")
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
    try:
        peak, source = resolve_peak(a.peak_tflops, a.gpu)
    except ValueError as exc:
        print(f"mfu: error: {exc}", file=sys.stderr)
        return 2
    run = a.run or mfu_report.write_sample(a.sample)
    try:
        result = compute(
            a.model, run, a.seq_len, peak_tflops=peak, skip=a.skip_steps, peak_source=source
        )
    except (OSError, ValueError, KeyError) as exc:
        print(f"mfu: error: {exc}", file=sys.stderr)
        return 1
    mfu_report.print_result(result)
    doc: dict = result
    if a.command:
        probe = None
        if a.probe:
            log = Path(a.probe_log).read_text(errors="replace") if a.probe_log else ""
            probe = mfu_report.probe_summary(json.loads(Path(a.probe).read_text()), log)
        doc = {
            "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": a.command,
            "job": json.loads(a.job),
            "machine": mfu_report.machine(),
            "probe": probe,
            "train": result,
            "layouts": mfu_report.layouts(a.layouts, a.layouts_skipped),
        }
        section = mfu_report.markdown(doc)
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
