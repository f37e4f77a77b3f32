"""`make pool`: the scored pool. Runs the fixed, seeded list of fault runs (faults/pool_list.py),
one `make fault` each, as a user would type it, and scores each run's verdict against what was
injected: the culprit named right (exactly the rank hit), a wrong rank named (never), the class,
and how long after the fault the verdict was ready against the collective timeout.

`python -m tuning.harness pool [--seed n] [--run-id base] [--pick 1,5,23] [--dry-run]`: SEED draws
a fresh pool (faults/pool_list.py `draw`); PICK runs some experiments by number (the suite runs
three); DRY_RUN lists them. Writes
runs/<base>/pool.json and pool.md (docs/faults.md: how to read it); exits 1 unless every
culprit was named right or every rank named.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

from tuning.harness.errors import ROOT, HarnessError
from tuning.harness.faults import pool_list
from tuning.harness.faults.fault_json import FaultRecord
from tuning.harness.faults.kinds import TABLE
from tuning.harness.flags.run_flags import int_arg
from tuning.harness.layout import options
from tuning.harness.run_files import folders

BASE = "pool"
RUN_LIMIT_S = 900  # one fault run's wall time at most (fms's image starts slowly)
SEEN = ROOT / "docs" / "records" / "pool_seen.json"  # seeds whose runs were read to fix a rule


def seen(seed: int | None) -> str | None:
    """Why a seed's draw is not fresh (its runs were read to find or fix a rule), else None."""
    if seed is None:
        seed = pool_list.SEED
    return (folders.read_json(SEEN).get("seeds") or {}).get(str(seed))


def register(sub) -> None:
    # RUN_ID, PICK, DRY_RUN: flag_table
    p = sub.add_parser("pool", help="run the scored pool of fault runs and score the verdicts")
    p.set_defaults(fn=main)


def picked(pick: str | None, seed: int | None = None) -> list[pool_list.Experiment]:
    every = pool_list.experiments() if seed is None else pool_list.draw(seed)
    if not pick:
        return every
    try:
        wanted = [int(x) for x in pick.split(",") if x.strip()]
    except ValueError:
        raise HarnessError(
            f"PICK={pick!r}: experiment numbers, comma-separated (1-{len(every)})"
        ) from None
    bad = [n for n in wanted if not 1 <= n <= len(every)]
    if bad or not wanted:
        raise HarnessError(
            f"PICK={pick!r}: the pool's experiments are 1-{len(every)} "
            "(`make pool DRY_RUN=1` lists them)"
        )
    return [every[n - 1] for n in wanted]


def main(a: argparse.Namespace) -> int:
    seed = int_arg("SEED", a.seed, 0)  # a fresh draw; unset: the committed list
    base = options.checked_run_id(a.run_id or (BASE if seed is None else f"{BASE}-s{seed}"))
    chosen = picked(a.pick, seed)
    why = seen(seed)
    which = "the committed list (seed 30)" if seed is None else f"a draw, SEED={seed}"
    fresh = "seen: a regression run, not a fresh draw" if why else "fresh: no rule was fit to it"
    print(f"harness: pool: {which}: {len(chosen)} run(s); {fresh}", flush=True)
    if why:
        print(
            f"harness: pool: SEED {seed if seed is not None else pool_list.SEED}: {why} "
            f"({SEEN.relative_to(ROOT)})",
            flush=True,
        )
    if a.dry_run:
        for e in chosen:
            print(f"{e.n:3}  {e.name}: {e.typed()}")
        return 0
    out = Path(a.runs).resolve() / base
    out.mkdir(parents=True, exist_ok=True)
    t0, rows = time.time(), []
    for e in chosen:
        rows.append(run(e, base, Path(a.runs).resolve(), out))
        write(out, rows, time.time() - t0, pool_list.SEED if seed is None else seed, not why)
    print(f"harness: pool: {tally(rows)}, in {time.time() - t0:.0f} s; {out / 'pool.md'}")
    return 0 if all(r["right"] or r["cannot_tell"] for r in rows) else 1


def run(e: pool_list.Experiment, base: str, runs_root: Path, out: Path) -> dict:
    run_id = f"{base}-{e.n:02d}"
    argv = pool_list.fault_argv(e.flags(), run_id, runs_root)
    print(f"harness: pool {e.n}: {e.name}", flush=True)
    t = time.time()
    with open(out / f"{run_id}.log", "w") as log:
        try:
            code = subprocess.run(
                argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=RUN_LIMIT_S
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    rec = FaultRecord.from_json(folders.read_json(runs_root / run_id / "fault.json"))
    row = score(e, rec)
    row.update(run_id=run_id, exit_code=code, wall_s=round(time.time() - t, 1))
    print(
        f"harness: pool {e.n}: {'right' if row['right'] else 'WRONG'}: {row['verdict']}", flush=True
    )
    return row


def score(e: pool_list.Experiment, rec: FaultRecord) -> dict:
    """One experiment's verdict against what was injected (a run with no fault.json: an empty
    record)."""
    v = rec.verdict
    culprits = v.culprits if v else None
    said = (
        f"{v.kind}: {', '.join(map(str, culprits)) or 'none'}"
        if v
        else f"no verdict ({rec.status or 'no record'})"
    )
    timeout = rec.timeout_s
    verdict_s = v.verdict_s if v else None
    return {
        "n": e.n,
        "experiment": e.name,
        "kind": e.kind,
        "rank": e.rank,
        "layout": e.layout,
        "trainer": e.trainer,
        "at_step": e.at_step,
        "outcome": rec.outcome,
        "verdict": said,
        "class": v.kind if v else None,
        "culprits": culprits,
        **named(culprits, e.world, e.rank),
        "world": e.world,
        "class_right": (v.kind if v else None) == TABLE[e.kind].judged,
        "verdict_s": verdict_s,
        "timeout_s": timeout,
        "before_timeout": verdict_s is not None and timeout is not None and verdict_s < timeout,
        "evidence": v.evidence if v else None,
        "rule": v.rule if v else None,
        "torch_agrees": v.fr_trace.agrees if v and v.fr_trace else None,
    }


def named(culprits: list[int] | None, world: int, rank: int) -> dict[str, bool]:
    """right (exactly the rank struck), cannot_tell (every rank of the world named: the verdict
    cannot tell them apart, a cause they share or two ranks alike: neither right nor wrong),
    wrong_rank (another rank named)."""
    unsure = bool(culprits) and len(culprits) > 1 and sorted(culprits) == list(range(world))
    return {
        "right": culprits == [rank],
        "cannot_tell": unsure,
        "wrong_rank": bool(set(culprits or ()) - {rank}) and not unsure,
    }


def tally(rows: list[dict]) -> str:
    """ "22/24 culprits named right, 1 cannot tell, 0 wrong rank(s) named" """
    right = sum(r["right"] for r in rows)
    unsure = sum(r.get("cannot_tell", False) for r in rows)
    return (
        f"{right}/{len(rows)} culprits named right, {unsure} cannot tell (every rank named), "
        f"{sum(r['wrong_rank'] for r in rows)} wrong rank(s) named"
    )


def write(out: Path, rows: list[dict], took_s: float, seed: int, fresh: bool = True) -> None:
    folders.write_json(
        out / "pool.json",
        {
            "seed": seed,
            "fresh": fresh,
            "code": folders.commit(),
            "took_s": round(took_s),
            "rows": rows,
        },
    )
    (out / "pool.md").write_text("\n".join(table(rows, took_s)) + "\n")


def table(rows: list[dict], took_s: float) -> list[str]:
    """The pool's table, for pool.md."""
    lines = [
        "| # | experiment | outcome | verdict (class: culprits) | culprit | class | "
        "verdict after fault s (timeout s) | evidence |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        culprit = (
            "right"
            if r["right"]
            else "cannot tell"
            if r.get("cannot_tell")
            else ("WRONG rank" if r["wrong_rank"] else "none named")
        )
        when = f"{r['verdict_s']} ({r['timeout_s']})" if r["verdict_s"] is not None else "-"
        evidence = (r["evidence"] or "").replace("|", "/")
        lines.append(
            f"| {r['n']} | {r['experiment']} | {r['outcome']} | {r['verdict']} | "
            f"{culprit} | {'right' if r['class_right'] else 'other'} | {when} | "
            f"{evidence} |"
        )
    lines += [
        "",
        f"{tally(rows)}, "
        f"{sum(r['class_right'] for r in rows)}/{len(rows)} classes right, "
        f"{sum(r['before_timeout'] for r in rows)}/{len(rows)} verdicts ready before the "
        f"collective timeout; {took_s / 60:.0f} min in all.",
    ]
    return lines
