"""The measured tables in docs/ that are made from records in docs/records/, and the records.

    .venv/bin/python benchmarks/tables.py          # check: exit 1 where a table is not its records
    .venv/bin/python benchmarks/tables.py --docs     # remake every table from its records
    .venv/bin/python benchmarks/tables.py --take-pool runs/pool-s4/pool.json
    .venv/bin/python benchmarks/tables.py --take-bench runs/<bench-id>/report.json NAME

A table sits between `<!-- table: NAME -->` and `<!-- end table -->` in its page. A record is a
run's own output trimmed to the fields its table reads (no logs, no checkpoints), with the code it
ran on and the command that made it. `--take-*` trims a run into a record; nothing in a table is
typed by hand. tests/unit/harness/test_records.py fails where a page and its records differ.
docs/repro.md's corpus table (benchmarks/repro_corpus.py --docs) and docs/stacks.md's hang
table (benchmarks/hang_times.py) are remade by their own scripts, from their own records.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "records"
sys.path.insert(0, str(ROOT))

from tuning.harness.commands import pool  # noqa: E402  (the pool's own scoring)


def load(pattern: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(RECORDS.glob(pattern))]


def record(name: str) -> dict:
    path = RECORDS / name
    if not path.is_file():
        raise SystemExit(f"no record {path.relative_to(ROOT)}: measure it (see its page)")
    return json.loads(path.read_text())


# --- the pool's fresh draws ------------------------------------------------------------------

POOL_KEEP = tuple(
    "n experiment kind rank world layout trainer at_step outcome verdict class culprits "
    "class_right verdict_s timeout_s".split()
)


def take_pool(path: Path) -> Path:
    """runs/<pool>/pool.json -> docs/records/pool_s<seed>.json, each row scored again by the
    pool's own rules (right, cannot tell, wrong rank) from its culprits."""
    rec = json.loads(path.read_text())
    rows = []
    for r in rec["rows"]:
        row = {k: r.get(k) for k in POOL_KEEP}
        rows.append({**row, **pool.named(r.get("culprits"), r["world"], r["rank"])})
    seed = rec["seed"]
    out = {
        "command": f"make pool SEED={seed}",
        "seed": seed,
        "code": rec.get("code"),
        "fresh": pool.seen(seed) is None,
        "took_s": rec["took_s"],
        "rows": rows,
    }
    dest = RECORDS / f"pool_s{seed}.json"
    dest.write_text(json.dumps(out, indent=1) + "\n")
    return dest


def pool_table() -> list[str]:
    recs = [r for r in load("pool_s[0-9]*.json") if r["fresh"] and pool.seen(r["seed"]) is None]
    out = [
        "| seed | code | runs | right culprit | cannot tell | wrong rank | none named | "
        "right class | minutes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    every = []
    for r in recs:
        rows = r["rows"]
        every += rows
        right, unsure = sum(x["right"] for x in rows), sum(x["cannot_tell"] for x in rows)
        wrong = [x["n"] for x in rows if x["wrong_rank"]]
        none = len(rows) - right - unsure - len(wrong)
        out.append(
            f"| {r['seed']} | {r['code']} | {len(rows)} | {right} | {unsure} | "
            f"{len(wrong)}{' (run ' + ', '.join(map(str, wrong)) + ')' if wrong else ''} | "
            f"{none} | {sum(x['class_right'] for x in rows)} | {r['took_s'] / 60:.0f} |"
        )
    right = sum(x["right"] for x in every)
    unsure = sum(x["cannot_tell"] for x in every)
    judged = len(every) - unsure
    n = max(len(every), 1)
    out += [
        "",
        f"{len(every)} runs from {len(recs)} seed(s) outside the ledger: {right} culprits named "
        f"right ({100 * right / n:.1f} % of the runs), {unsure} cannot tell (every rank "
        f"named), {sum(x['wrong_rank'] for x in every)} wrong rank(s); of the {judged} runs whose "
        f"verdict told a rank, {100 * right / max(judged, 1):.1f} % right.",
    ]
    missed = [(r["seed"], x) for r in recs for x in r["rows"] if not x["right"]]
    if missed:
        out += ["", "Not named right:", ""]
        out += [f"- seed {s}, run {x['n']} ({x['experiment']}): {x['verdict']}" for s, x in missed]
    return out


# --- the bench ---------------------------------------------------------------------------------


def take_bench(path: Path, name: str, command: str) -> Path:
    """runs/<bench>/report.json -> docs/records/bench_<name>.json: the goals as decided, each
    with its paired rounds and their lag-1 correlation, and each layout's headline figures."""
    rep = json.loads(path.read_text())
    d, meta = rep["derived"], rep.get("meta") or {}
    keep = ("name", "target", "verdict", "value", "interval", "pairs", "per_round", "lag1")
    layouts = {
        n: {
            "repeats": x["repeats"],
            "step_s_median": x["step_s"]["median"],
            "tokens_per_s": x["tokens_per_s"]["global"],
            "busbw_largest_GBps": x["busbw_largest_GBps"],
            "launch_to_first_step_s": x["launch_to_first_step_s"],
        }
        for n, x in d["layouts"].items()
    }
    out = {
        "command": command,
        "code": meta.get("code"),
        "design": (meta.get("design") or {}).get("describe"),
        "stopped": meta.get("stopped"),
        "layouts": layouts,
        "goals": [{k: g.get(k) for k in keep} for g in d["goals"]],
    }
    dest = RECORDS / f"bench_{name}.json"
    dest.write_text(json.dumps(out, indent=1) + "\n")
    return dest


def _iv(iv, fmt: str) -> str:
    return f"[{format(iv[0], fmt)}, {format(iv[1], fmt)}]" if iv else "none"


def bench_table(name: str) -> list[str]:
    r = record(f"bench_{name}.json")
    out = [
        f"`{r['command']}` on {r['code']}: {r['stopped']}",
        "",
        "| goal | target | verdict | median [interval] | pairs | "
        "rounds' lag-1 correlation [90 %] |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for g in r["goals"]:
        secs = g["target"].endswith(" s")
        fmt, unit = ("+.3f", " s") if secs else (".3f", "")
        c = g.get("lag1")
        corr = f"{c['r']:+.2f} {_iv(c['interval'], '+.2f')} ({c['n']})" if c else "-"
        value = format(g["value"], fmt) if g["value"] is not None else "-"
        value += f" {_iv(g['interval'], fmt)}{unit}"
        out.append(
            f"| {g['name']} | {g['target']} | {g['verdict']} | {value} | {g['pairs']} | {corr} |"
        )
    out += [
        "",
        "| layout | rounds | steady step s (median) | tokens/s | busbw GB/s | "
        "launch to first step s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for n, x in r["layouts"].items():
        cells = [
            f"{x['step_s_median']:.4f}" if x["step_s_median"] else "-",
            f"{x['tokens_per_s']:,.0f}" if x["tokens_per_s"] else "-",
            f"{x['busbw_largest_GBps']:.3f}" if x["busbw_largest_GBps"] else "-",
            f"{x['launch_to_first_step_s']:.2f}" if x["launch_to_first_step_s"] else "-",
        ]
        out.append(f"| {n} | {x['repeats']} | {' | '.join(cells)} |")
    return out


# --- the trainer's overhead --------------------------------------------------------------------


def overhead_table() -> list[str]:
    r = record("trainer_overhead.json")
    out = [
        f"`{r['command']}` on {r['code']}:",
        "",
        "| pair (order) | sft_trainer tok/s | bare Trainer tok/s | ratio (sum/sum) | "
        "ratio (per-step median) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for i, p in enumerate(r["pairs"], 1):
        out.append(
            f"| {i} ({', '.join(p['order'])}) | {p['sft']['mean']:,.0f} | "
            f"{p['bare']['mean']:,.0f} | {p['ratio_mean']:.3f} | {p['ratio_median']:.3f} |"
        )
    mean = statistics.median(p["ratio_mean"] for p in r["pairs"])
    med = statistics.median(p["ratio_median"] for p in r["pairs"])
    out.append(f"| **median** | | | **{mean:.3f}** | **{med:.3f}** |")
    return out


# --- pages -------------------------------------------------------------------------------------

TABLES = {
    "pool-fresh": ("docs/faults.md", pool_table),
    "trainer-overhead": ("docs/benchmarks.md", overhead_table),
    "bench-default": ("docs/benchmarks.md", lambda: bench_table("default")),
    "bench-job": ("docs/benchmarks.md", lambda: bench_table("job")),
}
BLOCK = re.compile(r"(<!-- table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end table -->)", re.S)


def remade(text: str) -> str:
    def one(m: re.Match) -> str:
        _, render = TABLES[m.group("name")]
        return m.group(1) + "\n".join(render()) + "\n" + m.group(4)

    return BLOCK.sub(one, text)


def pages() -> dict[Path, str]:
    """Each page with a table of TABLES, as it is."""
    return {ROOT / page: (ROOT / page).read_text() for page, _ in TABLES.values()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", action="store_true", help="remake the tables in their pages")
    ap.add_argument("--take-pool", type=Path, metavar="POOL_JSON")
    ap.add_argument("--take-bench", nargs=3, metavar=("REPORT_JSON", "NAME", "COMMAND"))
    a = ap.parse_args()
    if a.take_pool:
        print(take_pool(a.take_pool))
    if a.take_bench:
        print(take_bench(Path(a.take_bench[0]), a.take_bench[1], a.take_bench[2]))
    stale = []
    for path, text in pages().items():
        new = remade(text)
        if new != text:
            stale.append(path.relative_to(ROOT))
            if a.docs:
                path.write_text(new)
    if stale and not a.docs:
        print(f"tables differ from their records in: {', '.join(map(str, stale))} (--docs)")
        return 1
    print("remade: " + ", ".join(map(str, stale)) if stale else "every table is its records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
