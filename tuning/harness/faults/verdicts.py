"""A fault run's verdict (verdict/rules.py): judged when the ranks' stacks are taken (a hang,
before the peers' collective timeout; steps slowed), printed then, and judged again at the end
with every rank's exit. fault.json and summary.json keep the last one, with how long after the
fault a verdict first named those culprits (`verdict_s`); fault.md says it first. The verdict
reads what the ranks showed, never what was injected: the pool (`make pool`, pool.py)
compares the two."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from tuning.harness.faults.fault_json import FaultRecord
from tuning.harness.run_files import folders, metric_lines
from tuning.harness.verdict import live
from tuning.harness.verdict.record import Verdict


class Verdicts:
    """What a fault run's follow keeps for its verdicts: each early one (with when), torch's
    analysis of the dump, the nodes' facts while they still existed."""

    def __init__(self):
        self.early: list[tuple[float, Verdict]] = []  # (when, the verdict)
        self.fr: dict | None = None
        self.nodes: dict | None = None

    def at_dump(self, follow, nodes, taken: dict, metrics: dict) -> None:
        self.nodes = live.node_facts(nodes, set(follow.running))
        self.fr = live.fr_of(nodes, taken)
        v = live.judge(
            nodes.layout.topology.world_size,
            nodes.run_dir / "output",
            metrics,
            taken,
            self.fr,
            facts_of_nodes=self.nodes,
        )
        self.early.append((time.time(), v))
        print("\n".join(live.said(v)))


def exits(record: FaultRecord, t0: float) -> dict[int, dict]:
    """Each rank's exit as faults/record.py found it, for the verdict: what a user's run would
    show (`seen_signature`), never a kind's own words or its OOM-killed label (given to the rank
    the fault hit): the verdict reads the signal and the container's OOM flag."""
    return {
        x.rank: {
            "code": x.exit_code,
            "signal": x.signal,
            "oom": x.oom_killed,
            "signature": x.seen_signature,
            "t": (x.end_t or 0) + t0,
            "by_itself": x.ended_by == "itself",
        }
        for x in record.ranks
    }


def final(record: FaultRecord, follow, run_dir: Path, taken: dict | None) -> Verdict:
    """The verdict at the end, with `verdict_s`: from the fault to the first verdict that named
    the same culprits and class (an early one; else when its last fact came: the ranks' end)."""
    keep: Verdicts = follow.verdicts
    nodes = {r: dict(x) for r, x in (keep.nodes or {}).items()}
    for x in record.ranks:  # a node the follow never saw running never started
        nodes.setdefault(x.rank, {})["started"] = x.node in follow.running
    output = run_dir / "output"
    teardown_at = folders.read_json(run_dir / "summary.json").get("teardown_at")
    metrics = live.from_outside(metric_lines.read_metrics(output), run_dir / "logs", teardown_at)
    v = live.judge(
        record.world_size, output, metrics, taken, keep.fr, exits(record, follow.t0), nodes
    )
    fault_at = follow.injected_at
    same = [at for at, e in keep.early if (e.kind, e.culprits) == (v.kind, v.culprits)]
    at = same[0] if same else _last_fact(record, follow)
    v = replace(v, verdict_s=round(at - fault_at, 2) if fault_at and at else None, early=bool(same))
    folders.write_json(
        run_dir / "summary.json",
        {**folders.read_json(run_dir / "summary.json"), "verdict": v.to_json()},
    )
    return v


def _last_fact(record: FaultRecord, follow) -> float | None:
    ends = [x.end_t for x in record.ranks if x.end_t is not None]
    return max(ends) + follow.t0 if ends else follow.finished_at


def lines(rec: FaultRecord) -> list[str]:
    """fault.md's verdict, said first."""
    v = rec.verdict
    if not v:
        return []
    who = ", ".join(map(str, v.culprits)) or "none named"
    said = ["torch's own check" if v.rule == "torch" else "the harness's reading of the ranks"]
    if v.verdict_s is not None:
        early = " (at the dump, before the collective timeout)" if v.early else ""
        said.append(f"{v.verdict_s} s after the fault{early}")
    out = [
        f"- **verdict: {v.kind}; culprit rank(s): {who}** ({', '.join(said)})",
        f"- evidence: {v.evidence}",
    ]
    fr = v.fr_trace
    if fr and fr.said:
        agrees = {True: "; the same collective", False: "; another collective"}
        out.append(f"- torch's flight recorder analysis: {fr.said}{agrees.get(fr.agrees, '')}")
    elif fr and fr.error:
        out.append(f"- torch's flight recorder analysis could not run: {fr.error}")
    return out
