"""How soon a hang is named, and how soon it ends (issue 53), on what hangs: users' own bugs,
run as a user runs them (`make up SRC=tests/user_bugs ENTRY=<bug>.py ARGS=...`, 3 or 4 CPU
ranks, both layouts), and the hanging fault kinds (`make fault`).

    .venv/bin/python benchmarks/hang_times.py [--runs DIR] [--docs]

Per run: the verdict; the seconds from the stall (the last progress any rank logged) to the
verdict said; the job's collective timeout; and the seconds from that timeout to the run's end
(the harness ends a hang 30 s past it). Written to docs/records/hang_times.json; --docs remakes
docs/stacks.md's table from that record (tests/unit/verdict/test_hang_record.py checks the two
agree).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "records" / "hang_times.json"
DOCS = ROOT / "docs" / "stacks.md"
BEGIN, END = "<!-- hang times: benchmarks/hang_times.py --docs -->", "<!-- end hang times -->"
HF_ARGS = (
    "--output_dir /output --max_steps 30 --per_device_train_batch_size 4 --ddp_timeout 20 "
    "--logging_steps 1 --report_to none --save_strategy no"
)
# (name, make words): the users' bugs that hang, and the fault kinds that do
RUNS = [
    *(
        (
            f"hf_callback_allreduce {layout}",
            [
                "up",
                "SRC=tests/user_bugs",
                "ENTRY=hf_callback_allreduce.py",
                f"ARGS={HF_ARGS}",
                "NPROC=3",
                f"LAYOUT={layout}",
            ],
        )
        for layout in ("single", "per-rank")
    ),
    *(
        (
            f"{bug} {layout}",
            [
                "up",
                "SRC=tests/user_bugs",
                f"ENTRY={bug}.py",
                "ARGS=--steps 30 --timeout 10",
                "NPROC=4",
                f"LAYOUT={layout}",
            ],
        )
        for bug in ("barrier_if", "partial_save", "slow_loader")
        for layout in ("single", "per-rank")
    ),
    *(
        (
            f"fault {kind} {layout}",
            ["fault", f"FAULT={kind}", "RANK=1", "TIMEOUT=10", f"LAYOUT={layout}"],
        )
        for kind, layout in (
            ("pause", "per-rank"),
            ("slow-main", "per-rank"),
            ("mismatch", "per-rank"),
            ("skip-collective", "single"),
        )
    ),
]


def run_one(name: str, words: list[str], runs: Path, i: int) -> dict:
    run_id = f"hang-{i:02d}"
    out = subprocess.run(
        [
            "make",
            "-s",
            "--no-print-directory",
            *words,
            "GPUS=0",
            f"RUN_ID={run_id}",
            f"RUNS={runs}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    run_dir = runs / run_id
    row = {"name": name, "command": "make " + " ".join(words), "exit": out.returncode}
    if words[0] == "fault":
        rec = json.loads((run_dir / "fault.json").read_text())
        v = rec.get("verdict") or {}
        row.update(
            verdict=f"{v.get('class')}, {v.get('culprits')}",
            stall_to_verdict_s=rec.get("hang_detected_s"),
            timeout_s=rec.get("timeout_s"),
            timeout_to_end_s=None,
            outcome=rec.get("outcome"),
        )
        return row
    summary = json.loads((run_dir / "summary.json").read_text())
    v = summary.get("verdict") or {}
    stall, hang = summary.get("stall") or {}, summary.get("hang") or {}
    row.update(
        verdict=f"{v.get('class')}, {v.get('culprits')}",
        stall_to_verdict_s=stall.get("verdict_after_s"),
        timeout_s=hang.get("timeout_s"),
        timeout_to_end_s=hang.get("ended_after_timeout_s"),
        outcome=summary.get("reason") or summary.get("status"),
    )
    return row


def table(rows: list[dict]) -> str:
    out = [
        "| run | verdict | stall to verdict | the job's timeout | timeout to end | how it ended |",
        "| --- | --- | --- | --- | --- | --- |",
    ]

    def s(x):
        return "-" if x is None else f"{x} s"

    for r in rows:
        how = (r["outcome"] or "")[:90]
        out.append(
            f"| {r['name']} | {r['verdict']} | {s(r['stall_to_verdict_s'])} | "
            f"{s(r['timeout_s'])} | {s(r['timeout_to_end_s'])} | {how} |"
        )
    return "\n".join(out)


def docs_section(rows: list[dict]) -> str:
    return f"{BEGIN}\n{table(rows)}\n{END}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=Path)
    p.add_argument("--docs", action="store_true", help="remake docs/stacks.md's table only")
    a = p.parse_args(argv)
    if a.docs:
        rows = json.loads(RECORD.read_text())
        text = DOCS.read_text()
        start, end = text.index(BEGIN), text.index(END) + len(END)
        DOCS.write_text(text[:start] + docs_section(rows) + text[end:])
        return 0
    runs = a.runs or Path(tempfile.mkdtemp(prefix="hang-times-"))
    rows = []
    for i, (name, words) in enumerate(RUNS):
        rows.append(run_one(name, words, runs, i))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
