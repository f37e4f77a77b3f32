"""torch's own flight recorder analysis (torch.distributed.flight_recorder, the library behind
fr_trace) over every rank's dump of a run, as JSON on stdout, for the host's verdict
(tuning/harness/verdict/rules.py; the host never imports torch, so it runs this in a rank's
container, or with the project's Python for LAYOUT=host):

    python fr_check.py <output>/stacks/fr [since]

Each rank's dump is written there by tuning/container/rank/stack_dump.py when its stacks are taken
(with `since`, a unix time, only the dumps written since then: one taken of the same ranks). What
torch gives: the first collective, by sequence number, that not every rank called alike (the
ranks missing from it, and each rank whose op, sizes or dtypes differ, with torch's reason).
What it does not, and the host works out by hand: which rank is the odd one out (torch names
every rank that differs from the one it read first as a "culprit", its own comment says so).
It also flags collectives every rank recorded alike: gloo records an all_gather's output as
one [1, n] tensor, which its size rule (output numel = input numel x ranks) refuses; those
are counted (`alike`), not listed, and the cap on flags is lifted so they cannot hide the
first real one.

One repair, said in the output (`repaired`): a gloo dump (torch 2.13) lists its process group
under the name "" with desc "", while its entries name the group "0"/"default_pg", and
fr_trace stops on a KeyError. The group's name and desc are taken from the entries.
Standalone (standard library and torch): mounted beside the rank recorder in a user's image.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import sys
import tempfile

CAP = 10_000  # fr_trace stops after --mismatch_cap flags (10): its false ones come first
SHOWN = 20  # flagged collectives written out


def analyse(folder: str, since: float = 0.0) -> dict:
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig
    from torch.distributed.flight_recorder.components.loader import read_dir

    with tempfile.TemporaryDirectory() as fresh:
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            if name.startswith("rank") and os.path.getmtime(path) >= since:
                shutil.copy(path, fresh)
        args = JobConfig().parse_args(
            [fresh, "--allow-incomplete-ranks", "--prefix", "rank", "--mismatch_cap", str(CAP)]
        )
        details, version = read_dir(args)
    repaired = _repair(details)
    report = io.StringIO()
    log = logging.getLogger("Flight Recorder")
    handler = logging.StreamHandler(report)
    log.addHandler(handler)
    try:
        db = build_db(details, args, version)
    finally:
        log.removeHandler(handler)
    flagged = [_flagged(c) for c in db.collectives if not c.pass_check or c.missing_ranks]
    alike = sum(1 for c in flagged if c["alike"])
    flagged = [c for c in flagged if not c["alike"]][:SHOWN]
    ranks = sorted(int(d["rank"]) for d in details.values())
    return {
        "ok": True,
        "version": version,
        "ranks": ranks,
        "collectives": len(db.collectives),
        "flagged": flagged,
        "alike": alike,
        "repaired": repaired,
        "report": report.getvalue().strip(),
    }


def _repair(details: dict) -> bool:
    repaired = False
    for d in details.values():
        names = {tuple(e["process_group"]) for e in d["entries"]}
        config = d["pg_config"]
        if all(name in config for name, _ in names):
            continue
        ranks = next(iter(config.values()))["ranks"] if config else "[]"
        d["pg_config"] = {
            name: {"name": name, "desc": desc, "ranks": ranks} for name, desc in names
        }
        repaired = True
    return repaired


def _flagged(c) -> dict:
    op = c.collective_name.rpartition(":")[2]
    differs = {
        str(rank): {
            "op": m.collective_name.rpartition(":")[2],
            "in": m.input_sizes,
            "out": m.output_sizes,
            "why": str(m.type_of_mismatch),
        }
        for rank, m in (c.mismatch_collectives or {}).items()
    }
    same = all(
        (d["op"], d["in"], d["out"]) == (op, c.input_sizes, c.output_sizes)
        for d in differs.values()
    )
    return {
        "seq": c.collective_seq_id,
        "op": op,
        "in": c.input_sizes,
        "out": c.output_sizes,
        "missing": sorted(c.missing_ranks or []),
        "differs": differs,
        "torch_culprits": sorted(int(r) for r in differs),
        "alike": bool(differs) and same and not c.missing_ranks,
    }


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(
            "usage: fr_check.py <folder of rank<N> flight recorder dumps> [since: unix s]",
            file=sys.stderr,
        )
        return 2
    try:
        out = analyse(argv[0], float(argv[1]) if len(argv) == 2 else 0.0)
    except Exception as e:  # the verdict goes on without it, saying why
        out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
