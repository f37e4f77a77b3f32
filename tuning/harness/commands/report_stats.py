"""The bench's uncertainty: a bootstrap interval over paired rounds, and the three-way verdict.

Standard library only. The resampling is seeded (`SEED`), so the same samples always give the
same interval, and the same report.

- `interval(values)`: the 90 % percentile-bootstrap interval of the median of `values` (the
  paired ratios or differences, one per round): `RESAMPLES` resamples with replacement, the
  median of each, then their 5th and 95th percentiles. Fewer than `MIN_PAIRS` values give no
  interval: one round says nothing about how the next one lands. `paired` applies it to
  round i of a layout against round i of its reference.
- `verdict(value, interval, target, op, pairs)`: MET when the whole interval meets the target,
  MISSED when none of it does, else UNRESOLVED, with the rounds that would likely resolve it:
  the interval's half-width shrinks as 1/sqrt(n), so it clears the target once
  n' = n * (half-width / |value - target|)^2.
"""

from __future__ import annotations

import math
import random
import statistics

SEED = 20260101
RESAMPLES = 2000
LEVEL = 0.90
MIN_PAIRS = 2
MAX_ROUNDS_SHOWN = 100  # beyond this, "more than 100 rounds": a value at its target never resolves


def interval(values: list[float], seed: int = SEED) -> tuple[float, float] | None:
    """90 % bootstrap interval of the median of `values`; None with fewer than MIN_PAIRS."""
    if len(values) < MIN_PAIRS:
        return None
    rng = random.Random(seed)
    n = len(values)
    meds = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(RESAMPLES))
    tail = (1 - LEVEL) / 2
    return meds[int(tail * (RESAMPLES - 1))], meds[math.ceil((1 - tail) * (RESAMPLES - 1))]


def per_round(xs: list, refs: list, by: str) -> list[float]:
    """Round i of a layout against round i of its reference (``by`` "ratio" or
    "difference"); rounds missing either value are skipped."""
    if by == "ratio":
        return [x / r for x, r in zip(xs, refs, strict=False) if x is not None and r]
    return [x - r for x, r in zip(xs, refs, strict=False) if x is not None and r is not None]


def paired(xs: list, refs: list, by: str = "ratio") -> dict:
    """The median of the per-round ratios (or differences), their number and the 90 %
    bootstrap interval of that median (`report_stats.interval`; null under two pairs)."""
    vals = per_round(xs, refs, by)
    iv = interval(vals)
    return {"median": statistics.median(vals) if vals else None, "pairs": len(vals),
            "interval": list(iv) if iv else None, "per_round": vals}  # fmt: skip


def _meets(x: float, target: float, op: str) -> bool:
    return x <= target if op == "<=" else x >= target


def more_rounds(value: float, iv: tuple[float, float] | None, target: float, pairs: int) -> int:
    """Rounds to add before the interval likely clears the target (at least 1)."""
    if iv is None:
        return MIN_PAIRS - pairs
    half, gap = (iv[1] - iv[0]) / 2, abs(value - target)
    if gap == 0:
        return MAX_ROUNDS_SHOWN + 1
    need = math.ceil(pairs * (half / gap) ** 2)
    return max(1, min(need - pairs, MAX_ROUNDS_SHOWN + 1))


def verdict(value: float, iv: tuple[float, float] | None, target: float, op: str,
            pairs: int) -> tuple[str, int]:  # fmt: skip
    """("MET" | "MISSED" | "UNRESOLVED", rounds more to resolve it: 0 unless UNRESOLVED)."""
    if iv is not None and _meets(iv[0], target, op) and _meets(iv[1], target, op):
        return "MET", 0
    if iv is not None and not _meets(iv[0], target, op) and not _meets(iv[1], target, op):
        return "MISSED", 0
    return "UNRESOLVED", more_rounds(value, iv, target, pairs)


def shown_rounds(n: int) -> str:
    """``about 16 more rounds``; past MAX_ROUNDS_SHOWN, ``more than 100 more rounds``."""
    if n > MAX_ROUNDS_SHOWN:
        return f"more than {MAX_ROUNDS_SHOWN} more rounds"
    return f"about {n} more round" + ("s" if n != 1 else "")
