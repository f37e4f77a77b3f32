"""What one container's log shows of each of its ranks and of the container itself (log_lines.py
reads the lines). A rank is known by its `[rankN]:` prefix, torchrun's tee prefix, or, in a
container of one rank, by the container; an unprefixed line of a container of several ranks is
the launcher's or anybody's, and names no rank."""

from __future__ import annotations

from dataclasses import dataclass, field

from tuning.harness.commands.repro import log_lines

# A launcher's own exception at the end of its traceback: never a rank's cause (torchrun's
# ChildFailedError; accelerate's simple launcher's CalledProcessError; torchrun's SignalException
# when the container was told to stop)
LAUNCHERS = {"ChildFailedError", "CalledProcessError", "SignalException"}


@dataclass
class Rank:
    """What a rank's lines showed."""

    rank: int
    lines: int = 0
    joined: bool = False  # a line only a rank in the process group prints
    step: int | None = None  # the last training step its progress bar showed
    max_steps: int | None = None
    waiting: dict | None = None  # {"op", "seq", "pg"}: the collective its watchdog gave up on
    last_completed: int | None = None  # its process group's last completed work (2.3+)
    lost: str | None = None  # what ended it that a peer's failure causes (a consequence)
    exception: str | None = None  # its own traceback's last line, when not a consequence
    detail: str | None = None  # TORCH_DISTRIBUTED_DEBUG=DETAIL's message
    completed: bool = False  # the Trainer's end-of-training line
    t: float | None = None  # when it failed, where a line carried a full time
    clock: str | None = None  # ... or a header's "MMDD HH:MM:SS"
    call: str | None = None  # the torch.distributed call its traceback ended in
    _in_traceback: bool = False


@dataclass
class Container:
    """What a container's own lines showed (the launcher's, torchrun's)."""

    name: str
    node_rank: int
    nproc: int
    ranks: dict[int, Rank] = field(default_factory=dict)
    failures: dict[int, dict] = field(default_factory=dict)  # torchrun's: rank -> exit, time
    root_cause: int | None = None  # the rank torchrun named "first observed failure"
    death_signal: str | None = None  # the launcher was told to stop from outside (SIGTERM)
    death_signal_t: float | None = None  # when, where the line had a full time
    rdzv_wait: str | None = None  # the master gave up waiting for the other nodes
    unreachable: str | None = None  # the master's address never resolved or answered
    aborted: str | None = None  # an unprefixed C++ abort's consequence (gloo's size check)
    empty: bool = True
    known: int = 0  # lines a producer's pattern recognised (none: not torch's logs)
    first_t: float | None = None
    last_t: float | None = None


def consequence(text: str) -> str | None:
    """The CONSEQUENCES label (verdict/rules.py) of an error a peer's failure or a wait causes."""
    if log_lines.WATCHDOG.search(text) or log_lines.GLOO_TIMEOUT.search(text):
        return "collective timeout"
    if log_lines.GLOO_SIZE.search(text):
        return "gloo size check"
    if log_lines.GLOO_CLOSED.search(text):
        return "Connection closed by peer"
    if log_lines.GLOO_RESET.search(text) or log_lines.NCCL_REMOTE.search(text):
        return "Connection reset by peer"
    if (
        log_lines.RDZV_WAIT.search(text)
        or log_lines.CONNECT.search(text)
        or log_lines.RESOLVE.search(text)
    ):
        return "rendezvous timeout"
    return None


def read(text: str, name: str, node_rank: int, nproc: int) -> Container:
    c = Container(name, node_rank, nproc)
    own = node_rank * nproc
    failure: dict = {}
    for line in log_lines.split(text):
        c.empty = False
        c.first_t = c.first_t or line.t
        c.last_t = line.t or c.last_t
        c.known += line.rank is not None or line.clock is not None or log_lines.known(line.text)
        rank = line.rank
        if rank is None and line.local is not None:
            rank = own + line.local
        if rank is None and nproc == 1:
            rank = own
        if rank is None and (m := log_lines.WATCHDOG.search(line.text)) and m.group(1):
            rank = int(m.group(1))  # torch 2.1 prints no [rankN]: prefix; default group's rank
        if (
            rank is None
            and node_rank == 0
            and (log_lines.TQDM.match(line.text) or log_lines.OURS_STEP.match(line.text))
        ):
            rank = 0  # the Trainer's bar, our step line: the world process zero's
        _container_line(c, line, failure)
        if rank is not None:
            _rank_line(c.ranks.setdefault(rank, Rank(rank)), line)
    return c


def _container_line(c: Container, line: log_lines.Line, failure: dict) -> None:
    """torchrun's summary, its agent's signal, the rendezvous: the container's lines."""
    text = line.text
    if log_lines.ROOT_CAUSE.match(text):
        failure["root"] = True
    elif m := log_lines.FAILURE_TIME.match(text):
        failure["time"] = log_lines._utc(m.group(1), "%Y-%m-%d_%H:%M:%S")
    elif m := log_lines.FAILURE_RANK.match(text):
        failure["rank"] = int(m.group(1))
    elif m := log_lines.FAILURE_EXIT.match(text):
        if "rank" in failure:
            c.failures[failure["rank"]] = {"exit": int(m.group(1)), "t": failure.get("time")}
            if failure.get("root"):
                c.root_cause = failure["rank"]
        failure.clear()
    if line.rank is None and line.local is None and log_lines.GLOO_SIZE.search(text):
        c.aborted = "gloo size check"  # std::terminate prints no [rankN]: (facts.py places it)
    if m := log_lines.DEATH_SIGNAL.search(text):
        c.death_signal = {"15": "SIGTERM", "2": "SIGINT", "1": "SIGHUP"}.get(m.group(1), m.group(1))
        c.death_signal_t = c.death_signal_t or line.t
    if m := log_lines.RDZV_WAIT.search(text):
        c.rdzv_wait = f"{m.group(2)} of {m.group(3)} nodes joined in {m.group(1)} s"
    if m := log_lines.RESOLVE.search(text) or log_lines.CONNECT.search(text):
        c.unreachable = f"{m.group(1)}:{m.group(2)}"


def _rank_line(r: Rank, line: log_lines.Line) -> None:
    text = line.text
    r.lines += 1
    if line.rank is not None:
        r.joined = True  # the prefix is set by init_process_group
    if m := log_lines.TQDM.match(text) or log_lines.OURS_STEP.match(text):
        r.step, r.joined = int(m.group(1)), True
        r.max_steps = r.max_steps or int(m.group(2))
    if log_lines.HF_END.search(text):
        r.completed = True
    if m := log_lines.WATCHDOG.search(text):
        pg = log_lines.PG_NAME.search(text)
        r.waiting = {
            "op": log_lines.OPS.get(m.group(3), m.group(3).lower()),
            "seq": int(m.group(2)),
            "pg": (pg.group(2) or pg.group(1)) if pg else None,
        }
        _when(r, line)
    if m := log_lines.PG_STATUS.search(text):
        r.last_completed = int(m.group(2))
    if log_lines.DETAIL.search(text):
        r.detail = text[log_lines.DETAIL.search(text).start() :]
    if log_lines.TRACEBACK.match(text):
        r._in_traceback, r.call = True, None
        return
    if r._in_traceback and (m := log_lines.DIST_FRAME.search(text)):
        r.call = m.group(1)  # the innermost torch.distributed frame so far
    if r._in_traceback and (m := log_lines.EXCEPTION.match(text)):
        r._in_traceback = False
        said = f"{m.group(1)}: {m.group(2)}" if m.group(2) else m.group(1)
        if m.group(1) in LAUNCHERS:
            return
        lost = consequence(said)
        if lost:
            r.lost = r.lost or lost
        elif not r.detail or log_lines.DETAIL.search(said):
            r.exception = said
        _when(r, line)
    elif not r._in_traceback and (lost := consequence(text)):
        r.lost = r.lost or lost
        _when(r, line)


def _when(r: Rank, line: log_lines.Line) -> None:
    if r.t is None and line.t is not None:
        r.t = line.t
    if r.clock is None and line.clock is not None:
        r.clock = line.clock
