"""One verdict for a failed, hung or slowed run, across every rank: the culprit rank(s), the
class of failure, and the evidence in one sentence ("rank 2 never entered all_reduce #305,
where ranks 0, 1 and 3 wait").

It reads only what the ranks showed (facts.py gathers it: each rank's stack, its
flight recorder entries, its metrics and end line, its exit, its node), never what a fault run
injected. The rules, in order (the first that finds something decides):

  torch       TORCH_DISTRIBUTED_DEBUG=DETAIL's own mismatch check raised on the ranks (its
              message names a rank and the peer that differs: the odd one out is named most)
  desync      ranks wait at the same sequence number in different collectives, or the same
              one with different sizes; `left a collective` when the odd rank's op is the one
              that follows the others' (it skipped theirs). Before deaths: gloo's size check
              aborts a peer of the odd rank, not the odd rank itself
  died        a rank ended first by itself: a signal, the OOM killer, its own exception, while
              the others failed after it on the broken connection or a timeout
  stopped from outside  no rank died, and one got a SIGTERM first (an eviction, a preemption)
  never arrived  a rank never started, or never joined the group the others wait in
  frozen      a rank that cannot run (its container paused, its process stopped)
  network     a rank's node is off the run's network
  slow        (the run still steps) a rank reaches the collectives late
  never arrived  a live rank outside any collective while the others wait in one
  left        a rank ended cleanly while the others wait
With two ranks a desync has no odd one out: both are named, and the verdict says so. Where no
rule finds a culprit none is named (a wrong rank is worse than none).
torch's own analysis of the flight recorder (fr_check.py, fr_trace's library) is attached
where it ran, with whether it agrees: it finds the same first bad collective, but names as
"culprit" every rank that differs from the one it read first.
"""

from __future__ import annotations

from tuning.harness.verdict import desync, torch_check
from tuning.harness.verdict.record import Verdict
from tuning.harness.verdict.words import ranks_text

CONSEQUENCES = {  # an end these say is a peer's failure or a timeout, not a cause
    "Connection reset by peer",
    "Connection closed by peer",
    "Broken pipe",
    "Network is unreachable",
    "No route to host",
    "Connection refused",
    "collective timeout",
    "process-group timeout",
    "rendezvous timeout",
    "SIGTERM",
    "gloo size check",
}
WHOLE_JOB_S = 0.5  # every rank's SIGTERM within this of the first: the job's, not one rank's
# slow: a rank waited for alone a mean over LATE_S, and SLOW_X times any other. 5 ms stands
# well above what no rank is charged (at most 2 ms in every run seen); 20 ms missed seed 2's run
# 18, 7 ranks on 2 cores, whose throttled rank was charged 9.8 ms a collective, the others 0.2
LATE_S = 0.005
SLOW_X = 5


def judge(facts: dict) -> Verdict:
    """facts: {"world", "progressing", "ranks": {rank: {...}}, "fr_check"} (facts.py)."""
    ranks = facts["ranks"]
    found = (
        torch_check.detail_mismatch(ranks)
        or desync.desync(
            ranks
        )  # before deaths: a desync can kill a rank (gloo's size check aborts)
        or _died(ranks)
        or _stopped_outside(ranks)
        or _never_started(ranks)
        or _frozen(ranks)
        or _network(ranks)
        or (_slow(ranks) if facts.get("progressing") else None)
        # in a run that still steps, a rank between collectives is no culprit
        or (None if facts.get("progressing") else _busy(ranks))
        or _alone(ranks)
        or _left(ranks)
        or Verdict("unknown", [], _nothing(ranks), "none")
    )
    return torch_check.attach(found, facts.get("fr_check"))


def _what(p: dict) -> str:
    """ "all_reduce #305" (its sequence number where recorded), else the call it waits in."""
    return f"{p['op']} #{p['seq']}" if p.get("seq") is not None else p["call"]


def _waiters(ranks, but=()) -> list[int]:
    return [r for r, x in ranks.items() if r not in but and x.get("waiting")]


def _where_others(ranks, but) -> str:
    """ "; ranks 0 and 1 wait in all_reduce #305" (or what the others did instead)."""
    waiting = _waiters(ranks, but)
    if waiting:
        p = ranks[waiting[0]]["waiting"]
        what = _what(p)
        return f"; {ranks_text(waiting)} {_wait(ranks, waiting)} in {what}"
    ended = [r for r, x in ranks.items() if r not in but and x.get("ended_by")]
    if ended:
        why = sorted({ranks[r]["ended_by"] for r in ended})
        return f"; {ranks_text(ended)} then ended ({', '.join(why)})"
    return ""


def _wait(ranks, waiting) -> str:
    """ "wait", or "waited until they failed" when only their records at failure say so."""
    if all(ranks[r]["waiting"].get("at_failure") for r in waiting):
        return "waited until they failed" if len(waiting) > 1 else "waited until it failed"
    return "wait"


def _died(ranks) -> Verdict | None:
    first = {r: x["died"] for r, x in ranks.items() if x.get("died")}
    if not first:
        return None
    t0 = min(d["t"] for d in first.values())
    culprits = [r for r, d in first.items() if d["t"] - t0 <= 1.0]  # the first, and any with it
    hows = {first[r]["how"] for r in culprits}
    if len(culprits) == len(ranks) > 1 and len(hows) == 1:  # a cause they share, not a rank's
        return Verdict(
            "died",
            [],
            f"every rank {hows.pop()}: a cause they share (the job, "
            "the image, the setup), not one rank's",
            "hand",
        )
    how = "; ".join(f"rank {r} {first[r]['how']}" for r in culprits)
    return Verdict("died", culprits, f"{how}{_where_others(ranks, culprits)}", "hand")


def _stopped_outside(ranks) -> Verdict | None:
    """No rank died by itself, and one got a SIGTERM first: from outside the job (an eviction,
    a preemption, a deletion; a fault's `term`). A launcher that stops the other ranks after
    that sends theirs later: only the first is named."""
    got = {r: x["sigterm"] for r, x in ranks.items() if x.get("sigterm")}
    if not got:
        return None
    first, *rest = sorted(got, key=lambda r: got[r]["t"])
    if len(got) == len(ranks) > 1 and got[rest[0]]["t"] - got[first]["t"] < WHOLE_JOB_S:
        return Verdict(
            "stopped from outside",
            [],
            "every rank got SIGTERM at once: the whole "
            "job was stopped from outside (a preemption or deletion of every pod), "
            "not one rank",
            "hand",
        )
    said = f"rank {first} was stopped from outside ({got[first]['why']}) before any rank failed"
    return Verdict("stopped from outside", [first], said + _where_others(ranks, [first]), "hand")


def _never_started(ranks) -> Verdict | None:
    absent = [r for r, x in ranks.items() if not x.get("started")]
    present = [r for r in ranks if r not in absent]
    if not absent or not present:
        return None
    seen = f"{ranks_text(absent)} never started ({ranks[absent[0]].get('why_absent')})"
    return Verdict("never arrived", absent, seen + _where_others(ranks, absent), "hand")


def _marked(ranks, key: str, say) -> tuple[list[int], str]:
    """The ranks whose facts carry `key`, and what `say(rank, value)` says of each."""
    found = [r for r, x in ranks.items() if x.get(key)]
    return found, "; ".join(say(r, ranks[r][key]) for r in found)


def _frozen(ranks) -> Verdict | None:
    frozen, said = _marked(ranks, "frozen", lambda r, how: f"rank {r} {how}")
    if not frozen:
        return None
    unjoined = [r for r in frozen if not ranks[r].get("joined")]
    joined_others = [r for r, x in ranks.items() if r not in frozen and x.get("joined")]
    if unjoined == frozen and joined_others:  # it never got as far as the group
        return Verdict(
            "never arrived",
            frozen,
            f"{said}, before it joined the process group{_where_others(ranks, frozen)}",
            "hand",
        )
    return Verdict("stopped or frozen", frozen, said + _where_others(ranks, frozen), "hand")


def _network(ranks) -> Verdict | None:
    cut, said = _marked(ranks, "net", lambda r, what: f"rank {r}'s {what}")
    if not cut:
        return None
    if len(cut) == len(ranks) > 1:  # every node alike: the address or the network, not a rank
        return Verdict(
            "network",
            [],
            f"every rank's node could not reach the others ({ranks[cut[0]]['net']}): a cause "
            "they share (the master's address, its port, the network), not one rank's",
            "hand",
        )
    return Verdict("network", cut, said + _where_others(ranks, cut), "hand")


def waited_for(ranks) -> dict[int, float]:
    """How long the group waited for each rank alone, per collective, over the collectives
    every dumped rank finished: at each, the last rank to call it (the flight recorder's
    time_created) is charged its lead over the one before it; the mean over those collectives.
    A rank's lateness after the first caller would charge every rank that a loaded machine
    delayed with the slow one (pool run 11: ranks 1 and 3 were 0.1 s late at the collective
    the throttled rank 0 was 0.29 s late to, and its mean came out 4.99 times theirs)."""
    entries = {}
    for r, x in ranks.items():
        done = {c["seq"]: c["t"] for c in x.get("fr") or [] if c.get("state") == "done"}
        if done:
            entries[r] = {seq: t for seq, t in done.items() if t is not None}
    if len(entries) < 2:
        return {}
    common = set.intersection(*(set(e) for e in entries.values()))
    if not common:
        return {}
    alone = {r: 0.0 for r in entries}
    for seq in common:
        (t2, _), (t1, last) = sorted((e[seq], r) for r, e in entries.items())[-2:]
        alone[last] += t1 - t2
    # the mean: a slowed rank is last where its slowness falls (the first collective of a step)
    # and on time for the next one, called right after
    return {r: v / len(common) for r, v in alone.items()}


def _slow(ranks) -> Verdict | None:
    alone = waited_for(ranks)
    if len(alone) < 2:
        return None
    worst = max(alone, key=alone.get)
    others = [v for r, v in alone.items() if r != worst]
    if alone[worst] < LATE_S or alone[worst] < SLOW_X * max(others):
        return None
    return Verdict(
        "slow",
        [worst],
        f"rank {worst} reaches the collectives late: the others "
        f"waited for it alone a mean {alone[worst]:.2f} s per collective over the "
        f"last ones every rank finished (for any other: at most {max(others):.3f} s)",
        "hand",
        waited_s={str(r): round(v, 4) for r, v in alone.items()},
    )


def _busy(ranks) -> Verdict | None:
    waiting = {r: x["waiting"] for r, x in ranks.items() if x.get("waiting")}
    busy = [r for r, x in ranks.items() if x.get("busy") and not x.get("waiting")]
    if waiting and busy:
        said = "; ".join(f"rank {r} is {ranks[r]['busy']}" for r in busy)
        recorded = [p for p in waiting.values() if p.get("seq") is not None]
        p = (recorded or list(waiting.values()))[0]
        what = _what(p)
        return Verdict(
            "never arrived",
            busy,
            f"{ranks_text(busy)} never entered {what}, where "
            f"{ranks_text(waiting)} {_wait(ranks, waiting)}; {said}",
            "hand",
            seq=p.get("seq"),
            at_collective=True,
        )
    return None


def _alone(ranks) -> Verdict | None:
    """Fewer ranks waited in a collective, to their timeout, than did not wait in it at all
    (make repro's "passed": a job that ran on with nothing ended): the waiting ranks called a
    collective the others finished with other sizes, or never called."""
    waiting = _waiters(ranks)
    passed = [r for r, x in ranks.items() if x.get("passed") and not x.get("waiting")]
    if not waiting or len(waiting) >= len(passed):
        return None
    said = f"{ranks_text(passed)}, {ranks[passed[0]]['passed']}"
    they = "finished with other sizes, or never called"
    return _odd_waiters(ranks, waiting, f" until the timeout; of {said}", they)


def _odd_waiters(ranks, waiting: list[int], others: str, they: str) -> Verdict:
    """The few ranks waiting in a collective the many did not wait in: the odd ones (a desync),
    who called a collective the others `they` (finished with other sizes, never called)."""
    p = ranks[waiting[0]]["waiting"]
    what = _what(p)
    return Verdict(
        "desync",
        waiting,
        f"{ranks_text(waiting)} waited alone in {what}{others}: {ranks_text(waiting)} called a "
        f"collective the others {they}",
        "hand",
        seq=p.get("seq"),
        at_collective=True,
    )


def _left(ranks) -> Verdict | None:
    """Ranks ended (completed) while others wait in a collective. The fewer side is the odd one,
    as with ranks behind (make repro's _behind): the few that ended skipped a collective the
    many still wait in; the few that wait called one the many ended without (a save's barrier
    under `if is_main_process:`). As many on each side: the ones that ended, as before."""
    done = [r for r, x in ranks.items() if x.get("completed")]
    waiting = _waiters(ranks, done)
    if not done or not waiting:
        return None
    if len(waiting) < len(done):
        said = f", which {ranks_text(done)} ended (completed) without"
        return _odd_waiters(ranks, waiting, said, "never called")
    return Verdict(
        "left a collective",
        done,
        f"{ranks_text(done)} ended (completed) while {_where_others(ranks, done)[2:]}",
        "hand",
    )


def _nothing(ranks) -> str:
    waiting = _waiters(ranks)
    ops = {(ranks[r]["waiting"].get("op"), ranks[r]["waiting"].get("seq")) for r in waiting}
    if len(waiting) > 1 and len(waiting) == len(ranks) and len(ops) == 1:
        p = ranks[waiting[0]]["waiting"]
        what = _what(p)
        return (
            f"every rank waits in {what}, alike, and none is missing or frozen: the ranks "
            "may not reach each other (network), but no rank can be named"
        )
    return "no rank stands out in what the ranks showed"
