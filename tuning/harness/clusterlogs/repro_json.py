"""repro.json as a type: `ReproRecord`, what `make repro` made of a folder of logs (judge.py:
what was read, the verdict, what the logs could not tell; commands/repro.py: the replay, and
with RUN=1 how it went). `to_json` is the one writer of repro.json's dict, `from_json` the one
reader; no other module reads its keys.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tuning.harness.clusterlogs.replay import Replay
from tuning.harness.verdict.record import Verdict


@dataclass(frozen=True)
class LogsRead:
    """What the folder held: the files read and not, notes on them, the world size (stated by
    a line or an object, else at least the ranks seen), the pods, the ranks no log or object
    shows, the last step the logs show."""

    files: list[str]
    unread: list[str]
    notes: list[str]
    world_size: int
    world_stated: bool
    pods: list[str]
    missing_ranks: list[int]
    step: int | None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> LogsRead:
        return cls(**d)


@dataclass(frozen=True)
class Hung:
    """Pods still running with no rank failed: where each rank's stack can be taken."""

    pods: list[str]
    containers: list[str]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Hung:
        return cls(**d)


@dataclass(frozen=True)
class ReplayLine:
    """The replay here: its plan, the `make fault` line that runs it, and the `make repro
    RUN=1` line that runs it and compares."""

    plan: Replay
    command: str
    run: str

    def to_json(self) -> dict:
        return {**asdict(self.plan), "command": self.command, "run": self.run}

    @classmethod
    def from_json(cls, d: dict) -> ReplayLine:
        plan = Replay(**{k: d[k] for k in Replay.__dataclass_fields__})
        return cls(plan, d["command"], d["run"])


@dataclass(frozen=True)
class ReplayRun:
    """RUN=1: the replay's run, its exit, its verdict (None: its fault.json held none), the
    roles its culprits have here, and whether that matches the cluster's verdict."""

    run_id: str
    exit: int
    verdict: Verdict | None
    roles_here: list[str]
    matches: bool

    def to_json(self) -> dict:
        return {
            "run_id": self.run_id,
            "exit": self.exit,
            "verdict": self.verdict.to_json() if self.verdict else {},
            "roles_here": self.roles_here,
            "matches": self.matches,
        }

    @classmethod
    def from_json(cls, d: dict) -> ReplayRun:
        v = d["verdict"]
        return cls(
            d["run_id"],
            d["exit"],
            Verdict.from_json(v) if v else None,
            d["roles_here"],
            d["matches"],
        )


@dataclass(frozen=True)
class ReproRecord:
    """One folder judged. Named culprits come with `caveats` (what the logs could not tell
    only qualifies them); none named, with `could_not_tell`."""

    read: LogsRead
    verdict: Verdict | None = None
    could_not_tell: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    hung: Hung | None = None
    # make repro's own (commands/repro.py)
    run_id: str | None = None
    from_folder: str | None = None
    replay: ReplayLine | None = None
    no_replay: str | None = None  # named, but no fault kind here causes its class
    run: ReplayRun | None = None

    @property
    def named(self) -> bool:
        """The verdict names a culprit."""
        return bool(self.verdict and self.verdict.culprits)

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "read": self.read.to_json(),
            "verdict": self.verdict.to_json() if self.verdict else None,
            "could_not_tell": self.could_not_tell,
            "caveats": self.caveats,
            "hung": self.hung.to_json() if self.hung else None,
            "run_id": self.run_id,
            "from_folder": self.from_folder,
            "replay": self.replay.to_json() if self.replay else None,
        }
        if self.no_replay is not None:
            out["no_replay"] = self.no_replay
        if self.run is not None:
            out["run"] = self.run.to_json()
        return out

    @classmethod
    def from_json(cls, d: dict) -> ReproRecord:
        return cls(
            LogsRead.from_json(d["read"]),
            Verdict.from_json(d["verdict"]) if d["verdict"] else None,
            d["could_not_tell"],
            d["caveats"],
            Hung.from_json(d["hung"]) if d["hung"] else None,
            d.get("run_id"),
            d.get("from_folder"),
            ReplayLine.from_json(d["replay"]) if d.get("replay") else None,
            d.get("no_replay"),
            ReplayRun.from_json(d["run"]) if d.get("run") else None,
        )
