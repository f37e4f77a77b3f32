"""The bench's uncertainty: a distribution-free interval for the median of paired rounds, and
the three-way verdict.

- `interval(values)`: the order-statistic interval of the median of `values` (the paired
  ratios or differences, one per round): sorted, it is [x_k, x_(n+1-k)], which holds the true
  median with probability `coverage(n, k)` = 1 - 2 P(Binomial(n, 1/2) < k), whatever the
  distribution (each round lands above or below the median as a fair coin). k is the largest
  that keeps the coverage at `LEVEL` (90 %); under `MIN_PAIRS` (5) rounds no k reaches it, and
  the interval is the whole range [min, max] with its true, lower coverage (3 rounds: 75 %).
  A percentile bootstrap of three rounds also gives [min, max], but calls it 90 %: that is how
  one bench said MET after three rounds and the next UNRESOLVED after four.
- `verdict(value, interval, target, op, pairs)`: with a 90 % interval (at least MIN_PAIRS
  rounds), MET when the whole interval meets the target, MISSED when none of it does; else
  UNRESOLVED, with the rounds that would likely resolve it: at least up to MIN_PAIRS, and as
  the interval's half-width shrinks as 1/sqrt(n), n' = n * (half-width / |value - target|)^2.
Exact and deterministic: the same samples always give the same interval and report.
"""

from __future__ import annotations

import functools
import math
import statistics

LEVEL = 0.90
MAX_ROUNDS_SHOWN = 100  # beyond this, "more than 100 rounds": a value at its target never resolves


def coverage(n: int, k: int) -> float:
    """P(x_k <= true median <= x_(n+1-k)) for n independent rounds."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n


@functools.cache  # derive asks it of every ratio after every round
def _k(n: int) -> int:
    """The largest k whose interval keeps LEVEL; 1 (the whole range) when none does."""
    return max([k for k in range(1, (n + 1) // 2 + 1) if coverage(n, k) >= LEVEL], default=1)


MIN_PAIRS = next(n for n in range(2, 50) if coverage(n, 1) >= LEVEL)  # 5: 93.75 %


def interval(values: list[float], k: int | None = None) -> tuple[float, float] | None:
    """The median's order-statistic interval [x_k, x_(n+1-k)] (`coverage_of` says how sure of
    the default k; a sequential look gives its own, `stopping`); None under 2."""
    if len(values) < 2:
        return None
    xs = sorted(values)
    k = k or _k(len(values))
    return xs[k - 1], xs[len(xs) - k]


def coverage_of(pairs: int) -> float | None:
    """The coverage of `interval` over `pairs` rounds (None under 2)."""
    return coverage(pairs, _k(pairs)) if pairs >= 2 else None


def per_round(xs: list, refs: list, by: str) -> list[float]:
    """Round i of a layout against round i of its reference (``by`` "ratio" or
    "difference"); rounds missing either value are skipped."""
    if by == "ratio":
        return [x / r for x, r in zip(xs, refs, strict=False) if x is not None and r]
    return [x - r for x, r in zip(xs, refs, strict=False) if x is not None and r is not None]


def paired(xs: list, refs: list, by: str = "ratio") -> dict:
    """The median of the per-round ratios (or differences), their number, the median's
    interval (`interval`; null under two pairs) and that interval's coverage."""
    vals = per_round(xs, refs, by)
    iv = interval(vals)
    return {
        "median": statistics.median(vals) if vals else None,
        "pairs": len(vals),
        "interval": list(iv) if iv else None,
        "coverage": coverage_of(len(vals)),
        "per_round": vals,
    }


def meets(x: float, target: float, op: str) -> bool:
    return x <= target if op == "<=" else x >= target


def clears(iv, target: float, op: str) -> str | None:
    """MET when the whole interval meets the target, MISSED when none of it does, else None."""
    if meets(iv[0], target, op) and meets(iv[1], target, op):
        return "MET"
    if not meets(iv[0], target, op) and not meets(iv[1], target, op):
        return "MISSED"
    return None


def more_rounds(value: float, iv: tuple[float, float] | None, target: float, pairs: int) -> int:
    """Rounds to add before a 90 % interval likely clears the target (at least 1)."""
    floor = max(1, MIN_PAIRS - pairs)
    if iv is None:
        return floor
    half, gap = (iv[1] - iv[0]) / 2, abs(value - target)
    if gap == 0:
        return MAX_ROUNDS_SHOWN + 1
    need = math.ceil(pairs * (half / gap) ** 2)
    return max(floor, min(need - pairs, MAX_ROUNDS_SHOWN + 1))


def verdict(
    value: float, iv: tuple[float, float] | None, target: float, op: str, pairs: int
) -> tuple[str, int]:
    """("MET" | "MISSED" | "UNRESOLVED", rounds more to resolve it: 0 unless UNRESOLVED)."""
    tag = clears(iv, target, op) if iv is not None and pairs >= MIN_PAIRS else None
    return (tag, 0) if tag else ("UNRESOLVED", more_rounds(value, iv, target, pairs))


def shown_rounds(n: int) -> str:
    """``about 16 more rounds``; past MAX_ROUNDS_SHOWN, ``more than 100 more rounds``."""
    if n > MAX_ROUNDS_SHOWN:
        return f"more than {MAX_ROUNDS_SHOWN} more rounds"
    return f"about {n} more round" + ("s" if n != 1 else "")


def poisson_interval(n: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact (Garwood) interval of a Poisson mean from one count `n`: the means under which
    seeing n or more (lower end) or n or fewer (upper end) has probability (1 - level) / 2."""
    tail = (1 - level) / 2

    def cdf(k: int, mean: float) -> float:  # P(X <= k)
        term = total = math.exp(-mean)
        for i in range(1, k + 1):
            term *= mean / i
            total += term
        return total

    def solve(f, lo: float, hi: float) -> float:  # f increasing on [lo, hi], f(root) = 0
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
        return (lo + hi) / 2

    top = n + 20 + 10 * math.sqrt(n + 1)
    upper = solve(lambda m: tail - cdf(n, m), 0.0, top)  # P(X <= n) falls as the mean grows
    lower = 0.0 if n == 0 else solve(lambda m: (1 - cdf(n - 1, m)) - tail, 0.0, top)
    return lower, upper
