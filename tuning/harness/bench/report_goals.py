"""The bench's goals: each a paired figure, its interval and a three-way verdict.

- single/host steady step time (ratio) <= 1.03;
- per-rank-shared/single busbw at the largest size (ratio) >= 0.95;
- single - host launch to first step (difference) <= 2 s.

Each is the median over rounds of round i of the layout against round i of the reference, with
the order-statistic interval of that median, decided by the rounds' stopping rule
(`stopping`). A fixed REPEAT looks once: the 90 % interval (`report_stats`: from 5 rounds on;
fewer rounds show their whole range with its true coverage, 75 % for 3). REPEAT=auto looks
after every round with group-sequential bounds: its interval is the one its bound gives at the
deciding look, and a goal keeps that verdict. MET: the interval wholly meets the target;
MISSED: none of it does; UNRESOLVED: it spans the target or no bound allows a decision yet,
and the sentence says about how many more rounds would resolve it, with its rounds' spread
(`need`) behind that. NOT MEASURED: a layout or its pairs are missing.

A MISSED goal names a cause only when a measured part explains the gap beyond its own
uncertainty: a phase whose paired difference's interval lies wholly above zero, the collective
when the busbw ratio's interval lies wholly below 1, a transport only when the two layouts'
collective traffic takes different paths (gloo bound to eth0 but connected inside one network
namespace stays on loopback: the probe records `loopback`, and `tuning.container.shared.transport`
names such a connection ``gloo/eth0 via lo``). Otherwise it says that no measured part explains it.
"""

from __future__ import annotations

from tuning.harness.bench import stopping
from tuning.harness.bench.goal import Decision, Goal
from tuning.harness.bench.report_stats import (
    MAX_ROUNDS_SHOWN,
    MIN_PAIRS,
    paired,
    shown_rounds,
)

GOAL_STEP_RATIO = 1.03
GOAL_BUSBW_RATIO = 0.95
GOAL_LAUNCH_DELTA_S = 2.0


def _iv(iv: list[float] | None, fmt: str) -> str:
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
    shown = f"busbw ratio single/host {bw['median']:.3f} {_iv(bw['interval'], '.3f')}"
    if bw["interval"] and bw["interval"][1] < 1.0:
        return f"the collective is slower ({shown}); " + _transport_cause(derived, "single", "host")
    return (
        f"no measured part explains it: the collective is not slower beyond its "
        f"uncertainty ({shown}); the rest is the step's compute."
    )


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
    return (
        f"{p} is later by {m:+.3f} s {_iv(d['interval'], '+.3f')} (median of paired differences)."
    )


# (name, layout, reference, per-round figure, paired by, target, op, unit, cause of a miss)
GOALS = (
    (
        "single/host steady step time",
        "single",
        "host",
        "step_s",
        "ratio",
        GOAL_STEP_RATIO,
        "<=",
        "",
        _step_cause,
    ),
    (
        "per-rank-shared/single busbw at largest size",
        "per-rank-shared",
        "single",
        "busbw_largest_GBps",
        "ratio",
        GOAL_BUSBW_RATIO,
        ">=",
        "",
        lambda report, derived, per: _transport_cause(derived, "per-rank-shared", "single"),
    ),
    (
        "single - host launch-to-first-step",
        "single",
        "host",
        "launch_to_first_step_s",
        "difference",
        GOAL_LAUNCH_DELTA_S,
        "<=",
        " s",
        _phase_cause,
    ),
)


def goals(report: dict, derived: dict, per: dict, design=stopping.FIXED) -> list[Goal]:
    """Every goal: value, interval, pairs, per-round values, verdict and its sentence."""
    out = []
    for name, layout, ref, figure, by, target, op, unit, cause in GOALS:
        shown_target = f"{op} {target}{unit}"
        absent = [n for n in (layout, ref) if n not in per]
        p = paired(per[layout][figure], per[ref][figure], by) if not absent else None
        if p is None or p["median"] is None:
            said = f"{name}: not measured (no {' or '.join(absent) or 'paired data'})."
            out.append(
                Goal(name, shown_target, None, None, 0, [], "NOT MEASURED", 0, sentence=said)
            )
            continue
        d = stopping.decide(p["per_round"], target, op, design)
        v, iv, n, tag, more = d.median, d.interval, d.pairs, d.verdict, d.more_rounds
        fmt = ".3f" if by == "ratio" else "+.3f"
        if design.kind == "fixed":
            sure = (
                f"{p['coverage']:.0%}".replace("%", " %") + f" interval {_iv(iv, fmt)}{unit}"
                if p["coverage"]
                else "no interval: one pair"
            )
            s = (
                f"{name} {by} {format(v, fmt)}{unit}, {sure} "
                f"(target {shown_target}, median of {n} paired {by}s): "
            )
        else:
            counts = (
                f"; {d.past} past the target, at most {d.bound} to decide" if d.bound >= 0 else ""
            )
            s = (
                f"{name} {by} {format(v, fmt)}{unit}, sequential interval {_iv(iv, fmt)}{unit} "
                f"at round {n} (target {shown_target}, median of {n} paired {by}s{counts}): "
            )
        if tag == "MET":
            s += "met."
        elif tag == "MISSED":
            s += "missed; " + cause(report, derived, per)
        else:
            s += f"unresolved: {_unresolved(design, d)}"
        if p["pairs"] > n and tag != "UNRESOLVED":
            s += f" {p['pairs'] - n} later pairs, run for another goal, are not looked at."
        need = stopping.need(p["per_round"][:n], target, op) if tag == "UNRESOLVED" else None
        out.append(
            Goal(
                name,
                shown_target,
                value=v,
                interval=iv,
                pairs=n,
                per_round=p["per_round"],
                verdict=tag,
                more_rounds=more,
                past=d.past,
                bound=d.bound,
                need=need,
                lag1=stopping.lag1(p["per_round"]),
                sentence=s,
            )
        )
    return out


def _unresolved(design, d: Decision) -> str:
    """Why a goal is open, and about how many more rounds would decide it."""
    n, more = d.pairs, d.more_rounds
    if design.kind == "fixed":
        why = (
            "one pair gives no interval"
            if not d.interval
            else "the interval spans the target"
            if n >= MIN_PAIRS
            else f"{n} rounds give no 90 % interval (it takes {MIN_PAIRS})"
        )
        return f"{why}; {shown_rounds(more)} would likely resolve it."
    first = design.first_decision()
    why = (
        f"the design decides from round {first} on"
        if n < first
        else "the interval spans the target"
    )
    if n >= design.last:
        return f"{why}, and the design's {design.last} looks are spent."
    if more > MAX_ROUNDS_SHOWN:
        left = f"its looks left (to round {design.last})"
        return f"{why}; {left} would decide it less than 4 times in 5."
    return f"{why}; about {more} more round{'s' if more != 1 else ''} would decide it 4 times in 5."


def need_line(g: Goal) -> str | None:
    """report.md's line under an unresolved goal: its rounds' spread and what a decision takes."""
    need = g.need
    if need is None or need.spread is None:
        return None
    unit = " s" if g.target.endswith(" s") else ""
    n = need.rounds_needed
    rounds = (
        f"more than {MAX_ROUNDS_SHOWN} rounds"
        if n > MAX_ROUNDS_SHOWN
        else f"about {n} rounds (REPEAT={n})"
    )
    return (
        f"why: its paired rounds spread ±{need.spread:.3f}{unit} (1.4826 x their median "
        f"absolute deviation) about a median {need.gap:.3f}{unit} from "
        f"the target, so about {need.past_chance:.0%} of rounds land past it; a fixed "
        f"bench, looked at once, would need {rounds} to decide it 4 times in 5, and a "
        f"REPEAT=auto bench decides it within its {stopping.LAST} rounds "
        f"{need.auto_decides:.0%} of the time."
    ).replace("%", " %")


def lag1_line(g: Goal, design) -> str | None:
    """report.md's line under a goal: its rounds' lag-1 correlation against what the design's
    error allows (stopping.RHO)."""
    c = g.lag1
    if not c:
        return None
    lo, hi = c.interval
    said = (
        f"its {c.n} paired rounds correlate {c.r:+.2f} from one round to the next "
        f"(90 % interval [{lo:+.2f}, {hi:+.2f}])"
    )
    allowed = getattr(design, "rho", 0.0)
    if lo > allowed:
        return f"{said}: more than the {allowed:g} the stated error holds for; it is higher."
    return f"{said}; the stated error holds up to {allowed:g}."
