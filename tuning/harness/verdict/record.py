"""The verdict as a type, and its JSON: `Verdict` (the culprits, the class, the evidence, the
rule that decided, and what a run adds to it) with torch's flight recorder analysis beside it
(`FrTrace`). `to_json` is the one writer of the dict that fault.json, summary.json and
repro.json hold under "verdict"; `from_json` the one reader. No other module reads its keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FrTrace:
    """torch's analysis of the flight recorders (tuning/container/rank/fr_check.py,
    torch_check.attach): whether it ran (`error`: why not), the ranks it read, whether their process
    groups had to be repaired, its first flagged collective (in fr_check's words), how many it
    flagged that were called alike, its sentence, and whether it points at the verdict's
    collective."""

    ran: bool
    error: str | None = None
    ranks: list[int] | None = None
    repaired: bool | None = None
    flagged: dict[str, Any] | None = None
    alike: int = 0
    said: str | None = None
    agrees: bool | None = None  # None: the verdict names no collective to compare

    def to_json(self) -> dict:
        if not self.ran:
            return {"ran": False, "error": self.error}
        out = {
            "ran": True,
            "ranks": self.ranks,
            "repaired": self.repaired,
            "flagged": self.flagged,
            "alike": self.alike,
            "said": self.said,
        }
        if self.agrees is not None:
            out["agrees"] = self.agrees
        return out

    @classmethod
    def from_json(cls, d: dict) -> FrTrace:
        if not d["ran"]:
            return cls(False, error=d.get("error"))
        return cls(
            True,
            ranks=d.get("ranks"),
            repaired=d.get("repaired"),
            flagged=d.get("flagged"),
            alike=d.get("alike", 0),
            said=d.get("said"),
            agrees=d.get("agrees"),
        )


@dataclass(frozen=True)
class Verdict:
    """One verdict across ranks (rules.judge). `kind` is its class ("died", "desync", ...:
    JSON's "class"); `rule` "torch" (torch's own check), "hand" (the harness's reading) or
    "none" (nothing found). The rest is what some verdicts carry."""

    kind: str
    culprits: list[int]
    evidence: str
    rule: str
    # the collective a rule judged at: its sequence number, None where the ranks recorded none.
    # JSON carries "seq" only for those rules, null included (fault.json keeps it so)
    seq: int | None = None
    at_collective: bool = False
    waited_s: dict[str, float] | None = None  # slow: each rank's mean wait alone, by rank
    fr_trace: FrTrace | None = None
    # a fault run's (faults/verdicts.py): from the fault to the first verdict that named these
    # culprits (None: unknown), and whether that was an early one, at a dump
    verdict_s: float | None = None
    early: bool | None = None
    read_from: str | None = None  # make up's verdict from a failed run's logs: what it read

    def __post_init__(self) -> None:  # culprits kept sorted; a seq given is a collective judged
        object.__setattr__(self, "culprits", sorted(self.culprits))
        if self.seq is not None:
            object.__setattr__(self, "at_collective", True)

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "class": self.kind,
            "culprits": list(self.culprits),
            "evidence": self.evidence,
            "rule": self.rule,
        }
        if self.at_collective:
            out["seq"] = self.seq
        if self.waited_s is not None:
            out["waited_s"] = dict(self.waited_s)
        if self.fr_trace is not None:
            out["fr_trace"] = self.fr_trace.to_json()
        if self.early is not None:  # both, as a fault run sets them
            out["verdict_s"] = self.verdict_s
            out["early"] = self.early
        if self.read_from is not None:
            out["read_from"] = self.read_from
        return out

    @classmethod
    def from_json(cls, d: dict) -> Verdict:
        fr = d.get("fr_trace")
        return cls(
            d["class"],
            d["culprits"],
            d["evidence"],
            d["rule"],
            seq=d.get("seq"),
            at_collective="seq" in d,
            waited_s=d.get("waited_s"),
            fr_trace=FrTrace.from_json(fr) if fr is not None else None,
            verdict_s=d.get("verdict_s"),
            early=d.get("early"),
            read_from=d.get("read_from"),
        )
