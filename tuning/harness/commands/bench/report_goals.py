"""The bench's goals: each a paired figure, its interval and a three-way verdict.

- single/host steady step time (ratio) <= 1.03;
- per-rank-shared/single busbw at the largest size (ratio) >= 0.95;
- single - host launch to first step (difference) <= 2 s.

Each is the median over rounds of round i of the layout against round i of the reference, with
the order-statistic interval of that median (`report_stats`: 90 % from 5 rounds on; fewer
rounds show their whole range with its true coverage, 75 % for 3). MET: a 90 % interval wholly
meets the target; MISSED: none of it does; UNRESOLVED: it spans the target or is not yet 90 %,
and the sentence says about how many more rounds would resolve it. NOT MEASURED: a layout or
its pairs are missing.

A MISSED goal names a cause only when a measured part explains the gap beyond its own
uncertainty: a phase whose paired difference's interval lies wholly above zero, the collective
when the busbw ratio's interval lies wholly below 1, a transport only when the two layouts'
collective traffic takes different paths (gloo bound to eth0 but connected inside one network
namespace stays on loopback: the probe records `loopback`, and `tuning.shared.transport` names
such a connection ``gloo/eth0 via lo``). Otherwise it says that no measured part explains it.
"""

from __future__ import annotations

from tuning.harness.commands.bench.report_stats import MIN_PAIRS, paired, shown_rounds, verdict

GOAL_STEP_RATIO = 1.03
GOAL_BUSBW_RATIO = 0.95
GOAL_LAUNCH_DELTA_S = 2.0


def _iv(p: dict, fmt: str) -> str:
    iv = p.get("interval")
    return f"[{format(iv[0], fmt)}, {format(iv[1], fmt)}]" if iv else "[no interval: one pair]"


def path(transport: list[str]) -> str:
    """The path the collective's bytes take: "loopback" when every connection stays inside
    one network namespace, else the transports themselves."""
    if transport and all(t.endswith("/lo") or t.endswith(" via lo") for t in transport):
        return "loopback"
    return ", ".join(transport) or "unknown"


def _transport_cause(derived: dict, name: str, ref: str) -> str:
    pa = path(derived["layouts"][name]["transport"])
    pb = path(derived["layouts"][ref]["transport"])
    if pa != pb:
        return f"the transport differs: {name}'s collective takes {pa} where {ref}'s takes {pb}."
    return f"not the transport: both layouts' collectives take the same path ({pa})."


def _step_cause(report: dict, derived: dict, per: dict) -> str:
    """Single steps slower than host: the collective only if it is measurably slower."""
    bw = paired(per["single"]["busbw_largest_GBps"], per["host"]["busbw_largest_GBps"])
    if bw["median"] is None:
        return "no probe pairs to tell whether the collective explains it."
    shown = f"busbw ratio single/host {bw['median']:.3f} {_iv(bw, '.3f')}"
    if bw["interval"] and bw["interval"][1] < 1.0:
        return f"the collective is slower ({shown}); " + _transport_cause(derived, "single", "host")
    return (f"no measured part explains it: the collective is not slower beyond its "
            f"uncertainty ({shown}); the rest is the step's compute.")  # fmt: skip


def _phase_cause(report: dict, derived: dict, per: dict) -> str:
    """The phase whose paired difference (single - host) is largest among those whose
    interval lies wholly above zero."""
    lays = {lay["name"]: lay.get("repeats") or [] for lay in report.get("layouts") or []}
    names = list(derived["layouts"]["single"]["phases_s"])
    found = []
    for p in names:
        xs = [(r.get("phases") or {}).get(p) or 0.0 for r in lays["single"]]
        ys = [(r.get("phases") or {}).get(p) or 0.0 for r in lays["host"]]
        d = paired(xs, ys, "difference")
        if d["interval"] and d["interval"][0] > 0:
            found.append((d["median"], p, d))
    if not found:
        return "no phase is later beyond its uncertainty."
    m, p, d = max(found)
    return f"{p} is later by {m:+.3f} s {_iv(d, '+.3f')} (median of paired differences)."


# (name, layout, reference, per-round figure, paired by, target, op, unit, cause of a miss)
GOALS = (
    ("single/host steady step time", "single", "host", "step_s", "ratio", GOAL_STEP_RATIO,
     "<=", "", _step_cause),
    ("per-rank-shared/single busbw at largest size", "per-rank-shared", "single",
     "busbw_largest_GBps", "ratio", GOAL_BUSBW_RATIO, ">=", "",
     lambda report, derived, per: _transport_cause(derived, "per-rank-shared", "single")),
    ("single - host launch-to-first-step", "single", "host", "launch_to_first_step_s",
     "difference", GOAL_LAUNCH_DELTA_S, "<=", " s", _phase_cause),
)  # fmt: skip


def goals(report: dict, derived: dict, per: dict) -> list[dict]:
    """Every goal: value, interval, pairs, per-round values, verdict and its sentence."""
    out = []
    for name, layout, ref, figure, by, target, op, unit, cause in GOALS:
        shown_target = f"{op} {target}{unit}"
        absent = [n for n in (layout, ref) if n not in per]
        p = paired(per[layout][figure], per[ref][figure], by) if not absent else None
        if p is None or p["median"] is None:
            out.append({"name": name, "target": shown_target, "value": None, "interval": None,
                        "pairs": 0, "per_round": [], "verdict": "NOT MEASURED",
                        "more_rounds": 0, "sentence": f"{name}: not measured (no "
                        f"{' or '.join(absent) or 'paired data'})."})  # fmt: skip
            continue
        v, iv = p["median"], p["interval"]
        tag, more = verdict(v, iv, target, op, p["pairs"])
        fmt = ".3f" if by == "ratio" else "+.3f"
        sure = (f"{p['coverage']:.0%}".replace("%", " %") + f" interval {_iv(p, fmt)}{unit}"
                if p["coverage"] else "no interval: one pair")  # fmt: skip
        s = (f"{name} {by} {format(v, fmt)}{unit}, {sure} "
             f"(target {shown_target}, median of {p['pairs']} paired {by}s): ")  # fmt: skip
        if tag == "MET":
            s += "met."
        elif tag == "MISSED":
            s += "missed; " + cause(report, derived, per)
        else:
            why = ("one pair gives no interval" if not iv else "the interval spans the target"
                   if p["pairs"] >= MIN_PAIRS else f"{p['pairs']} rounds give no 90 % interval"
                   f" (it takes {MIN_PAIRS})")  # fmt: skip
            s += f"unresolved: {why}; {shown_rounds(more)} would likely resolve it."
        out.append({"name": name, "target": shown_target, "value": v, "interval": iv,
                    "pairs": p["pairs"], "per_round": p["per_round"], "verdict": tag,
                    "more_rounds": more, "sentence": s})  # fmt: skip
    return out
