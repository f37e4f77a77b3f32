"""The verdict's desync rule (rules.py), by hand from every rank's flight recorder: the first
sequence number at which ranks recorded different collectives (another op, or other sizes).
Ranks merely further on (one rank has #10 where another stopped at #9) agree on every number
they share and are no desync. The odd ones out are the ranks unlike the biggest group there;
where two groups are as big (two ranks) every rank is named. An odd rank whose collective is
the one that follows the others' in their own history skipped theirs ("left a collective":
its sequence numbers are shifted from there on). Where every recorded number agrees but the
ranks wait at one number called from different places, those callers decide (by_caller).
"""

from __future__ import annotations

import re

from tuning.harness.verdict.record import Verdict
from tuning.harness.verdict.words import ranks_text

# A rooted collective's one side is the root's alone (scatter's inputs, gather's outputs): the
# root records sizes there that the others have none of, and that is no desync (a stall watch's
# dump of 64 entries a rank reached a data loader's scatter, and named its root)
ROOTED = {"scatter": "out", "gather": "in"}  # op -> the side every rank gives


def sig(p: dict) -> tuple:
    side = ROOTED.get(p["op"])
    if side:
        return (p["op"], str(p.get(side)))
    return (p["op"], str(p.get("in")), str(p.get("out")))


def shape(p: dict) -> str:
    """ "all_reduce of [4]": the op and its input's shape (one tensor: its shape alone)."""
    size = p.get("in")
    if not size:
        return p["op"]
    return f"{p['op']} of {size[0] if len(size) == 1 else size}"


def _histories(ranks) -> dict[int, dict[int, dict]]:
    return {
        r: {c["seq"]: c for c in x["fr"] if c.get("seq") is not None}
        for r, x in ranks.items()
        if x.get("fr")
    }


def first_disagreement(hist) -> tuple[int, dict[tuple, list[int]]] | None:
    """(seq, {signature: ranks}) at the lowest sequence number where ranks recorded unlike
    collectives."""
    for seq in sorted({s for h in hist.values() for s in h}):
        groups: dict[tuple, list[int]] = {}
        for r, h in hist.items():
            if seq in h:
                groups.setdefault(sig(h[seq]), []).append(r)
        if len(groups) > 1:
            return seq, groups
    return None


def desync(ranks) -> Verdict | None:
    hist = _histories(ranks)
    found = first_disagreement(hist)
    if not found:
        return by_caller(ranks) or by_op(ranks)
    seq, groups = found
    ordered = sorted(groups.values(), key=len, reverse=True)
    if len(ordered[0]) == len(ordered[1]) and sum(map(len, ordered)) < len(ranks):
        # a tie among the ranks that recorded it, others silent: which is odd is not known
        said = "; ".join(f"{ranks_text(rs)} called {shape(hist[rs[0]][seq])}" for rs in ordered)
        silent = sorted(set(ranks) - {r for rs in ordered for r in rs})
        return Verdict(
            "desync",
            [],
            f"{said} as collective #{seq}, and {ranks_text(silent)} "
            "recorded nothing there: no majority, and no odd one out can be named",
            "hand",
            seq=seq,
        )
    if len(ordered[0]) == len(ordered[1]):  # no odd one out: every rank is named
        said = "; ".join(f"{ranks_text(rs)} called {shape(hist[rs[0]][seq])}" for rs in ordered)
        named = sorted(r for rs in ordered for r in rs)
        return Verdict(
            "desync",
            named,
            f"{said} as collective #{seq}: with no majority there is "
            f"no odd one out, so every rank is named{_hint(hist, seq, ordered)}",
            "hand",
            seq=seq,
        )
    most, odd = ordered[0], sorted(r for rs in ordered[1:] for r in rs)
    theirs, mine = hist[most[0]][seq], hist[odd[0]][seq]
    follows = successor(hist[most[0]], theirs)
    waits, after = _after(hist[most[0]], seq)
    if follows and all(sig(hist[r][seq]) == follows for r in odd):
        where = f", where {ranks_text(most)} wait" if waits else f" ({ranks_text(most)} {after})"
        return Verdict(
            "left a collective",
            odd,
            f"{ranks_text(odd)} skipped {shape(theirs)} "
            f"#{seq}{where}, and went on to {shape(mine)}{_site(ranks, odd[0], seq)}, "
            "the collective that follows it (its sequence numbers are shifted by one "
            "from there on)",
            "hand",
            seq=seq,
        )
    said = "; ".join(f"rank {r} called {shape(hist[r][seq])}{_site(ranks, r, seq)}" for r in odd)
    where = " and wait in it" if waits else (f", {after}" if after else "")
    return Verdict(
        "desync",
        odd,
        f"{said} as collective #{seq}, where {ranks_text(most)} called {shape(theirs)}{where}",
        "hand",
        seq=seq,
    )


def _after(history: dict[int, dict], seq: int) -> tuple[bool, str]:
    """(still waiting in #seq, else what they went on to: "finished it and wait in ...")."""
    last = history[max(history)]
    if last.get("state") == "done":
        return False, ""
    if last["seq"] == seq:
        return True, ""
    return False, f"finished it and wait in {shape(last)} #{last['seq']}"


def _site(ranks, r: int, seq: int) -> str:
    """ " (at train.py:18)": where the rank called it, when its stack shows it waiting there."""
    w = ranks[r].get("waiting") or {}
    return f" (at {w['site']})" if w.get("site") and w.get("seq") == seq else ""


def successor(history: dict[int, dict], now: dict) -> tuple | None:
    """In a rank's flight recorder, the collective that followed the last earlier one alike
    `now` (a training loop repeats its collectives in order)."""
    for s in sorted((s for s in history if s < now["seq"]), reverse=True):
        if sig(history[s]) == sig(now):
            after = history.get(s + 1)
            return sig(after) if after else None
    return None


def _hint(hist, seq, ordered) -> str:
    """Two even groups: whether one group's collective is what follows the other's in that
    group's own history (it may have skipped theirs): said, but both stay named."""
    a, b = ordered[0], ordered[1]
    for mine, other in ((a, b), (b, a)):
        follows = successor(hist[other[0]], hist[other[0]][seq])
        if follows and sig(hist[mine[0]][seq]) == follows:
            return (
                f" ({ranks_text(mine)}'s {hist[mine[0]][seq]['op']} is the collective that "
                f"follows {hist[other[0]][seq]['op']} in {ranks_text(other)}'s own history: "
                f"{ranks_text(mine)} may have skipped it)"
            )
    return ""


def by_caller(ranks) -> Verdict | None:
    """Every rank waits in a collective, at one sequence number, called from different places:
    the odd ones out are named. A rank's collective that its flight recorder has not recorded
    yet (torch's DETAIL check runs first, and waits for every rank) is the one after its last on
    the default group. Seen: a rank that skipped the save's metrics all_gather went on to the
    model's gather while the others waited in the first, all as #185."""
    at: dict[int, tuple[int, str, str]] = {}
    for r, x in ranks.items():
        w = x.get("waiting") or {}
        done = [c["seq"] for c in x.get("fr") or [] if c.get("pg", 0) == 0 and c.get("seq")]
        seq = w.get("seq") if w.get("seq") is not None else (max(done) + 1 if done else None)
        if not w.get("caller") or seq is None:
            return None
        at[r] = (seq, w["caller"], w["op"])
    if len(at) < 2 or len({seq for seq, _, _ in at.values()}) > 1:
        return None
    groups: dict[str, list[int]] = {}
    for r, (_, caller, _) in at.items():  # by file and function: a rank's own line may differ
        groups.setdefault(re.sub(r":\d+ \(", " (", caller), []).append(r)
    if len(groups) < 2:
        return None
    ordered = sorted(groups.values(), key=len, reverse=True)
    seq = next(iter(at.values()))[0]
    said = "; ".join(
        f"{ranks_text(rs)} called {at[rs[0]][2]} from {at[rs[0]][1]}" for rs in ordered
    )
    if len(ordered[0]) == len(ordered[1]):  # no odd one out: every rank is named
        return Verdict(
            "desync",
            sorted(at),
            f"{said}, each as collective #{seq}: with no "
            "majority there is no odd one out, so every rank is named",
            "hand",
            seq=seq,
        )
    odd = sorted(r for rs in ordered[1:] for r in rs)
    return Verdict(
        "desync",
        odd,
        f"{said}, each as collective #{seq}: {ranks_text(odd)} called "
        "it from elsewhere than the others",
        "hand",
        seq=seq,
    )


def by_op(ranks) -> Verdict | None:
    """No sequence numbers (a cluster's logs: gloo says none), but every rank failed in a
    collective, the group hung (a timeout ended it) and no rank died by itself, and not all
    were in the same one: they waited on each other in unlike calls (a barrier inside an if: one
    rank in barrier, the others in all_reduce). The odd ones out are named; with no majority,
    every rank."""
    waits = {r: x.get("waiting") or {} for r, x in ranks.items()}
    if len(waits) < 2 or any(w.get("seq") is not None or not w.get("op") for w in waits.values()):
        return None
    ended = [x.get("ended_by") for x in ranks.values()]
    if "collective timeout" not in ended or any(x.get("died") for x in ranks.values()):
        return None  # the group hung (a timeout ended it), and no rank died by itself
    groups: dict[str, list[int]] = {}
    for r, w in waits.items():
        groups.setdefault(w["op"], []).append(r)
    if len(groups) < 2:
        return None
    ordered = sorted(groups.values(), key=len, reverse=True)
    said = "; ".join(f"{ranks_text(rs)} waited in {waits[rs[0]]['op']}" for rs in ordered)
    if len(ordered[0]) == len(ordered[1]):
        return Verdict(
            "desync",
            sorted(waits),
            f"{said}, until the group timed out: with no "
            "majority there is no odd one out, so every rank is named",
            "hand",
        )
    odd = sorted(r for rs in ordered[1:] for r in rs)
    return Verdict(
        "desync",
        odd,
        f"{said}, until the group timed out: they waited on each other "
        f"in unlike collectives, and {ranks_text(odd)} called another than the others",
        "hand",
    )
