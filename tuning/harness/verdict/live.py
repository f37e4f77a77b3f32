"""The verdict (rules.py) for a run the harness is driving: its nodes' facts (which ranks'
nodes ever started, which container lost the run's network), torch's flight recorder analysis
run in a live node, and the line printed on the console."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tuning.harness.layout.layout import off_network
from tuning.harness.stacks import dumps
from tuning.harness.verdict import facts, rules, torch_check
from tuning.harness.verdict.record import Verdict


def node_facts(nodes, started: set[str] | None = None) -> dict[int, dict]:
    """{rank: {"started", "net"}}: a node with no container has not started (`started`: the
    names of the nodes seen running so far, where the caller knows); in a per-rank isolated
    layout, a container with no interface on the run's network has lost it."""
    layout = nodes.layout
    out = {r: {"started": True} for r in range(layout.topology.world_size)}
    if not hasattr(nodes, "all_containers"):
        return out
    try:
        by_name = {c.labels.get("harness.node"): c for c in nodes.all_containers()}
        for node in layout.nodes():
            c = by_name.get(node.name)
            ran = c is not None or (started is not None and node.name in started)
            net = None
            if c is not None:
                c.reload()
                names = list(c.attrs["NetworkSettings"]["Networks"])
                if off_network(layout, names):
                    net = (
                        f"container {c.name} has no interface on the run's network "
                        f"(it is on: {', '.join(names) or 'none'})"
                    )
            for r in node.ranks:
                out[r] = {"started": ran, "net": net}
    except Exception as e:  # a diagnostic: what it could not read is said, not raised
        print(f"harness: could not read the nodes for the verdict: {e}", file=sys.stderr)
    return out


def fr_of(nodes, taken: dict | None) -> dict | None:
    """torch's analysis of the flight recorders the dump `taken` wrote, run in a live node."""
    if not taken or not any(x.get("state") == "dumped" for x in taken["ranks"].values()):
        return None
    output = nodes.run_dir / "output"
    return torch_check.run_fr_check(dumps.nodes_of(nodes), output, taken["started_at"])


# torch/distributed/elastic/multiprocessing/api.py SubprocessContext._close: the launcher stops
# its other workers after one failed ("Sending process 18209 closing signal SIGTERM")
_CLOSING = re.compile(r"Sending process (\d+) closing signal SIGTERM")
# torch/distributed/elastic/agent/server/api.py SimpleElasticAgent.run: the launcher itself got
# a signal from outside and stops its workers with it
_TOLD = re.compile(r"Received (?:Signals\.)?(?:SIGTERM|15) death signal")


def from_outside(metrics: dict, logs: Path, teardown_at: float | None = None) -> dict:
    """The metrics without the SIGTERMs that were no stop from outside: those a rank's own
    launcher sent it after another worker failed (its node's log says which pids it stopped: a
    failure's consequence), and those that came once the harness itself began stopping the run
    (`teardown_at`: a hang's or a deadline's stop, its teardown). A launcher that was itself
    told to stop (torchrun's "Received 15 death signal") before then passes the stop on: those
    stay."""
    sent = set()
    for f in logs.glob("*.log"):
        text = f.read_text(errors="replace")
        if not _TOLD.search(text):
            sent |= {int(p) for p in _CLOSING.findall(text)}

    def kept(y: dict) -> bool:
        if y.get("event") != "signal":
            return True
        came = y.get("at") or y.get("time") or 0.0
        return y.get("pid") not in sent and not (teardown_at and came >= teardown_at)

    return {r: [y for y in lines if kept(y)] for r, lines in metrics.items()}


def judge(
    world: int,
    output,
    metrics: dict,
    taken: dict | None,
    fr: dict | None = None,
    exits: dict | None = None,
    facts_of_nodes: dict | None = None,
) -> Verdict:
    """The verdict over a dump `taken` (None: none; its "progressing": taken while the ranks
    still stepped), torch's analysis `fr`, the metrics and what failed ranks recorded."""
    progressing = bool(taken and taken.get("progressing"))
    found = facts.gather(
        world, metrics, taken, exits, facts_of_nodes, progressing, fr, dumps.failed(output)
    )
    return rules.judge(found)


def judge_live(nodes, metrics: dict, taken: dict | None) -> Verdict:
    """The verdict now, for a run the harness is driving (its nodes as they are)."""
    return judge(
        nodes.layout.topology.world_size,
        nodes.run_dir / "output",
        metrics,
        taken,
        fr_of(nodes, taken),
        facts_of_nodes=node_facts(nodes),
    )


def said(v: Verdict) -> list[str]:
    """The console's lines for a verdict."""
    who = ", ".join(map(str, v.culprits)) or "none named"
    by = "torch's own check" if v.rule == "torch" else "the harness's reading"
    lines = [f"harness: verdict ({by}): {v.kind}, culprit rank(s): {who}: {v.evidence}"]
    fr = v.fr_trace
    if fr and fr.said:
        agrees = {True: " (the same collective)", False: " (another collective)"}
        lines.append(f"harness:   {fr.said}{agrees.get(fr.agrees, '')}")
    elif fr and fr.error:
        lines.append(f"harness:   torch's fr_trace could not run: {fr.error}")
    return lines
