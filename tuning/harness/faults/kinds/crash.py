"""crash: the trainer raises by itself at AT_STEP on RANK, told through the ranks' environment
(HARNESS_CRASH_AT_STEP, HARNESS_CRASH_RANK: tuning/container/sft/fault_hooks.py); the harness sees
it in the rank's end line. With MAX_RESTARTS it fires once per run (a marker in the output)."""

from __future__ import annotations

from tuning.harness.faults.kinds.kind import FAILS, Kind

FOREIGN = (
    "crash raises inside this repo's trainer (HARNESS_CRASH_AT_STEP); a foreign "
    "trainer (ENTRY, TRAINER=fms) has no such hook. Use kill or term."
)


def due(inj, metrics, nodes, now: float) -> list[tuple[str, int, float]]:
    """The rank struck itself: its end line says so."""
    return [
        (f"rank {inj.rank} raised: {x['error']}", inj.target_step(metrics), x["time"])
        for x in metrics.get(inj.rank, [])
        if x.get("event") == "end" and "injected crash" in (x.get("error") or "")
    ]


KINDS = (
    Kind(
        "crash",
        60,
        due=due,
        not_here={"foreign": FOREIGN},
        expect=FAILS,
        recovers=True,
        judged="died",
        pool_place=2,
        rank_env=lambda knobs: {
            "HARNESS_CRASH_AT_STEP": str(knobs["at_step"]),
            "HARNESS_CRASH_RANK": str(knobs["rank"]),
        },
        signatures=(("injected crash", r"injected crash"),),
    ),
)
