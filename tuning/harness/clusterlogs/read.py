"""What one container's log shows of each of its ranks and of the container itself (log_lines.py
reads the lines). A rank is known by its `[rankN]:` prefix, torchrun's tee prefix, or, in a
container of one rank, by the container; an unprefixed line of a container of several ranks is
the launcher's or anybody's, and names no rank."""

from __future__ import annotations

from dataclasses import dataclass, field

from tuning.harness.clusterlogs import log_lines

# A launcher's own exception at the end of its traceback: never a rank's cause (torchrun's
# ChildFailedError; accelerate's simple launcher's CalledProcessError; torchrun's SignalException
# when the container was told to stop)
LAUNCHERS = {
    "ChildFailedError",
    "CalledProcessError",
    "SignalException",
    "ProcessRaisedException",  # mp.spawn's parent: the child's own traceback follows it
    "ProcessExitedException",
}
SIGNAL_NUMBERS = {
    "SIGKILL": 9,
    "SIGTERM": 15,
    "SIGABRT": 6,
    "SIGSEGV": 11,
    "SIGBUS": 7,
    "SIGINT": 2,
}


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
    enqueued: int | None = None  # its process group's last enqueued work (2.3+)
    aborted: bool = False  # its watchdog's exception reached std::terminate: its process ended
    aborted_t: float | None = None  # when, where the line had a full time
    _in_traceback: bool = False
    _agent: bool = False  # the traceback is torchrun's agent's, not this rank's


@dataclass
class Container:
    """What a container's own lines showed (the launcher's, torchrun's)."""

    name: str
    node_rank: int
    nproc: int
    ranks: dict[int, Rank] = field(default_factory=dict)
    failures: dict[int, dict] = field(default_factory=dict)  # torchrun's: rank -> exit, time
    # launchers that name a worker by its local rank alone (DeepSpeed's, mp.spawn's)
    local_failures: dict[int, dict] = field(default_factory=dict)
    root_cause: int | None = None  # the rank torchrun named "first observed failure"
    death_signal: str | None = None  # the launcher was told to stop from outside (SIGTERM)
    death_signal_t: float | None = None  # when, where the line had a full time
    rdzv_wait: str | None = None  # the master gave up waiting for the other nodes
    unresolved: str | None = None  # the master's name never resolved (its node's DNS)
    unreachable: str | None = None  # the master's address never answered (which side: unknown)
    aborted: str | None = None  # an unprefixed C++ abort's consequence (gloo's size check)
    empty: bool = True
    known: bool = False  # a line a producer's pattern recognised (none: not torch's logs)
    stopped: set = field(default_factory=set)  # the PIDs of workers its launcher stopped after
    # another failed (torchrun's SIGTERMs)
    stopped_all: bool = False  # DeepSpeed's launcher: it kills every worker once one fails
    node_failed: dict | None = None  # DeepSpeed's launcher: a worker failed (which: not said)
    killing: list = field(default_factory=list)  # ... and when it began to stop each worker
    world_said: int | None = None  # the world size its lines say (launchers, trainers, NCCL)
    node_said: int | None = None  # its node rank, where its launcher says it
    nproc_said: int | None = None  # its ranks, where its launcher says them
    globals_seen: set = field(default_factory=set)  # global ranks its lines name
    locals_seen: set = field(default_factory=set)  # local ranks its lines name
    agent_error: str | None = None  # torchrun's agent's own exception (DistNetworkError, ...)
    peers_lost: list = field(default_factory=list)  # the peers NCCL's WARN lines say it lost
    batch: dict = field(default_factory=dict)  # the HF Trainer's batch sizes (the world from them)
    first_t: float | None = None
    last_t: float | None = None


def consequence(text: str, peers_lost: bool = False) -> str | None:
    """The CONSEQUENCES label (verdict/rules.py) of an error a peer's failure or a wait causes.
    `peers_lost`: NCCL's WARN lines said a peer was lost first (its "unhandled system error"
    follows from that)."""
    if log_lines.WATCHDOG.search(text) or log_lines.GLOO_TIMEOUT.search(text):
        return "collective timeout"
    if log_lines.GLOO_SIZE.search(text):
        return "gloo size check"
    if log_lines.GLOO_CLOSED.search(text):
        return "Connection closed by peer"
    if (
        log_lines.GLOO_RESET.search(text)
        or log_lines.NCCL_REMOTE.search(text)
        or log_lines.STORE_LOST.search(text)
        or (peers_lost and log_lines.NCCL_SYSTEM.search(text))
    ):
        return "Connection reset by peer"
    if (
        log_lines.RDZV_WAIT.search(text)
        or log_lines.CONNECT.search(text)
        or log_lines.RESOLVE.search(text)
    ):
        return "rendezvous timeout"
    return None


def read(text: str | list, name: str, node_rank: int | None, nproc: int) -> Container:
    """`text`: the log, or its lines as log_lines.scan gives them. `node_rank` None: not placed
    yet (source.py reads the lines first to place the pod)."""
    lines = log_lines.scan(text) if isinstance(text, str) else text
    c = Container(name, node_rank if node_rank is not None else 0, nproc)
    own = c.node_rank * nproc
    failure: dict = {}
    spawned = None  # mp.spawn's failed child: the traceback that follows is its own
    placing = node_rank is None
    for line, salient in lines:
        if placing and not salient:  # where the pod sits needs only the ranks its lines name
            if line.rank is not None:
                c.globals_seen.add(line.rank)
            elif line.local is not None:
                c.locals_seen.add(line.local)
            continue
        c.empty = False
        c.first_t = c.first_t or line.t
        c.last_t = line.t or c.last_t
        rank = line.rank
        if rank is None and line.local is not None:
            rank = own + line.local
        if not salient:  # no producer's words: counted only
            c.known = c.known or line.rank is not None or line.clock is not None
            if line.rank is not None:
                c.globals_seen.add(line.rank)
            if rank is None:
                rank = spawned if spawned is not None else own if nproc == 1 else None
            if rank is not None:
                r = c.ranks.setdefault(rank, Rank(rank))
                r.lines += 1
                r.joined = r.joined or line.rank is not None
            elif line.local is not None:
                c.locals_seen.add(line.local)
            continue
        if not c.known:  # one line a producer wrote is enough to read them as torch's
            c.known = line.rank is not None or line.clock is not None or log_lines.known(line.text)
        if m := log_lines.SPAWN_RAISED.match(line.text):
            spawned = own + int(m.group(1))
            c.locals_seen.add(int(m.group(1)))
            continue
        if rank is None and spawned is not None:
            rank = spawned
        if rank is None and nproc == 1:
            rank = own
        named = _named(line)  # a global rank the line's own words give
        if named is not None:
            c.globals_seen.add(named)
            rank = rank if rank is not None else named
        if rank is None and node_rank == 0 and log_lines.progress(line.text):
            rank = 0  # a trainer's progress: the world process zero's
        if rank is None and nproc > 1 and (gpu := log_lines.CUDA_OOM_GPU.search(line.text)):
            # an unprefixed CUDA OOM in a pod of several workers: the GPU it names is the
            # worker's local rank (one GPU a worker, as torchrun and DeepSpeed give them)
            if log_lines.EXCEPTION.match(line.text) and int(gpu.group(1)) < nproc:
                rank = own + int(gpu.group(1))
                c.ranks.setdefault(rank, Rank(rank))._in_traceback = True
        _container_line(c, line, failure)
        if rank is not None:
            r = c.ranks.setdefault(rank, Rank(rank))
            _rank_line(c, r, line)
            if spawned is not None and not r._in_traceback and r.lines > 1:
                spawned = None  # the child's traceback ended
    for local, f in c.local_failures.items() if not placing else ():  # by local rank alone
        c.failures.setdefault(own + local, {**f, "local": local})  # (DeepSpeed's, mp.spawn's)
    return c


def _named(line: log_lines.Line) -> int | None:
    """The global rank a line names in its words: its [rankN]: prefix, the default group's
    [Rank N] of a watchdog line (torch 2.1 prints no prefix), a trainer's "Process rank: 3"."""
    if line.rank is not None:
        return line.rank
    text = line.text
    if "Watchdog" in text and (m := log_lines.WATCHDOG.search(text)) and m.group(1):
        if not log_lines.PG_NAME.search(text) or "default_pg" in text:
            return int(m.group(1))
    if "rank" in text or "RANK" in text:
        if m := log_lines.PROCESS_RANK.search(text) or log_lines.LIGHTNING_RANK.search(text):
            return int(m.group(1))
    return None


def _container_line(c: Container, line: log_lines.Line, failure: dict) -> None:
    """torchrun's summary, its agent's signal, the rendezvous, what the launchers and trainers
    say of the world: the container's lines."""
    text = line.text
    if line.local is not None:
        c.locals_seen.add(line.local)
    # each pattern is tried only where its words are: a long log's lines are mostly progress
    if text[:1] in (" ", "R", "=", "-"):
        _summary_line(c, text, failure)
    if "closing signal" in text and (m := log_lines.CLOSING.search(text)):
        c.stopped.add(m.group(1))  # by PID: a log printed twice (accelerate test) counts once
    if "sigkill_handler" in text:
        _deepspeed_line(c, line)
    if "rocess index" in text and (m := log_lines.ACCEL_INDEX.match(text)):
        (c.locals_seen if m.group(1) else c.globals_seen).add(int(m.group(2)))
    if "Process rank" in text and (m := log_lines.LOCAL_PROCESS_RANK.search(text)):
        if int(m.group(1)) >= 0:
            c.locals_seen.add(int(m.group(1)))
    if "local_rank" in text and (m := log_lines.AGENT_FAILED.search(text)):
        c.locals_seen.add(int(m.group(2)))  # the summary, where the log holds it, says more
        c.local_failures.setdefault(int(m.group(2)), {"exit": int(m.group(1)), "t": line.t})
    if "terminated with" in text and (m := log_lines.SPAWN_EXITED.search(text)):
        code = -SIGNAL_NUMBERS.get(m.group(2), 0) if m.group(2) else int(m.group(3))
        c.locals_seen.add(int(m.group(1)))
        c.local_failures[int(m.group(1))] = {"exit": code, "t": line.t}
    if log_lines.WORLD_WORDS.search(text):
        _world_line(c, text)
    if "NCCL WARN" in text and (m := log_lines.NCCL_WARN.search(text)):
        if peer := log_lines.NCCL_PEER.search(m.group(1)):
            c.peers_lost.append(peer.group(1))
    if "data size" in text and line.rank is None and line.local is None:
        if log_lines.GLOO_SIZE.search(text):  # std::terminate prints no [rankN]: (facts.py
            c.aborted = "gloo size check"  # places it)
    if "what()" in text and line.rank is None and _named(line) is None:
        # a watchdog's abort whose rank no word gives ("[PG 1 Rank 4]" is a rank in group 1):
        # where its reason is a peer's loss or a timeout, the SIGABRT it ends in is that
        # consequence, not a cause (ProcessGroupNCCL's watchdog, torch 1.13-2.x)
        c.aborted = c.aborted or consequence(text, bool(c.peers_lost))
    if "death signal" in text and (m := log_lines.DEATH_SIGNAL.search(text)):
        c.death_signal = {"15": "SIGTERM", "2": "SIGINT", "1": "SIGHUP"}.get(m.group(1), m.group(1))
        c.death_signal_t = c.death_signal_t or line.t
    if "waiting for clients" in text and (m := log_lines.RDZV_WAIT.search(text)):
        c.rdzv_wait = f"{m.group(2)} of {m.group(3)} nodes joined in {m.group(1)} s"
    if "addresses" in text and (m := log_lines.RESOLVE.search(text)):
        c.unresolved = f"{m.group(1)}:{m.group(2)}"
    if "socket" in text and (m := log_lines.CONNECT.search(text)):
        c.unreachable = f"{m.group(1)}:{m.group(2)}"


def _summary_line(c: Container, text: str, failure: dict) -> None:
    """torchrun's ChildFailedError summary: each failed worker's rank, local rank, exit, time."""
    if log_lines.ROOT_CAUSE.match(text):
        failure["root"] = True
    elif m := log_lines.FAILURE_TIME.match(text):
        failure["time"] = log_lines._utc(m.group(1), "%Y-%m-%d_%H:%M:%S")
    elif m := log_lines.FAILURE_RANK.match(text):
        failure["rank"], failure["local"] = int(m.group(1)), int(m.group(2))
        c.globals_seen.add(int(m.group(1)))
        c.locals_seen.add(int(m.group(2)))
    elif m := log_lines.FAILURE_EXIT.match(text):
        if "rank" in failure:
            c.failures[failure["rank"]] = {
                "exit": int(m.group(1)),
                "t": failure.get("time"),
                "local": failure["local"],
            }
            if failure.get("root"):
                c.root_cause = failure["rank"]
        last = failure.get("rank")
        failure.clear()
        if last is not None:
            failure["last"] = last  # its error file's traceback may follow
    elif "last" in failure and (m := log_lines.FAILURE_ERROR.match(text)):
        # the worker's own exception, where it ran under @record (its error_file's traceback,
        # indented under "traceback :")
        c.failures[failure["last"]].setdefault("error", f"{m.group(1)}: {m.group(2)}")
    elif text.startswith("=") or text.startswith("-"):
        failure.pop("last", None)


def _deepspeed_line(c: Container, line: log_lines.Line) -> None:
    text = line.text
    if log_lines.DS_KILLING.search(text):
        c.stopped_all = True
        c.killing.append(line.t)
    if m := log_lines.DS_EXIT.search(text):
        # the code is the first failed worker's, but the command is the LAST one the launcher
        # spawned (its loop variable), whichever failed: it names no rank, only how many
        local = log_lines.DS_LOCAL.search(m.group(1))
        if local:
            c.locals_seen.add(int(local.group(1)))
        c.node_failed = {"exit": int(m.group(2)), "t": line.t}
        if (local := reaped(c.killing + [line.t])) is not None:
            c.local_failures[local] = c.node_failed


def _world_line(c: Container, text: str) -> None:
    """What launchers and trainers print of the world and of this node's place in it."""
    if m := log_lines.GROUP_RANK.search(text):
        c.node_said = int(m.group(1))
    if m := log_lines.GLOBAL_RANKS.search(text):
        ranks = [int(x) for x in m.group(1).split(",") if x.strip()]
        c.globals_seen |= set(ranks)
        c.nproc_said = len(ranks)
    if m := log_lines.DS_NODE.search(text):
        c.nproc_said, c.node_said = int(m.group(2)), int(m.group(3))
        c.world_said = max(c.world_said or 0, int(m.group(1)) * int(m.group(2)))
    for pattern in (log_lines.GLOBAL_WORLD, log_lines.DS_WORLD):
        if m := pattern.search(text):
            c.world_said = max(c.world_said or 0, int(m.group(1)))
    if m := log_lines.WORLD_SAID.search(text):
        said = int(next(g for g in m.groups() if g))
        c.world_said = max(c.world_said or 0, said)
    for key, pattern in (
        ("batch", log_lines.HF_BATCH),
        ("total", log_lines.HF_TOTAL),
        ("accum", log_lines.HF_ACCUM),
    ):
        if m := pattern.search(text):
            c.batch[key] = int(m.group(1).replace(",", ""))


def reaped(times: list) -> int | None:
    """The local rank of the worker DeepSpeed's launcher had already reaped when it stopped
    them all (deepspeed/launcher/launch.py sigkill_handler, 0.8+): it logs "Killing subprocess"
    for each worker in spawn order (local rank order), then terminate_process_tree() waits for
    that one to exit; a worker already gone raises NoSuchProcess at once. The one whose stop
    took no time, where every other took half a second or more, is the one that failed. The
    times are the lines' own (milliseconds); None where they do not single one out."""
    if len(times) < 4 or any(t is None for t in times):
        return None
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    quick = [i for i, g in enumerate(gaps) if g <= 0.05]
    if len(quick) == 1 and min(g for i, g in enumerate(gaps) if i != quick[0]) >= 0.5:
        return quick[0]
    return None


def hf_world(c: Container) -> int | None:
    """The HF Trainer's total batch over its per-device batch and accumulation: the world."""
    b = c.batch
    if {"batch", "total", "accum"} <= set(b) and b["batch"] * b["accum"]:
        world, rest = divmod(b["total"], b["batch"] * b["accum"])
        return world if world and not rest else None
    return None


def _rank_line(c: Container, r: Rank, line: log_lines.Line) -> None:
    text = line.text
    r.lines += 1
    if line.rank is not None:
        r.joined = True  # the prefix is set by init_process_group
    if step := log_lines.progress(text):
        r.step, r.joined = step[0], True
        r.max_steps = r.max_steps or step[1]
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
    if ("what()" in text or "Terminating" in text) and log_lines.TERMINATED.search(text):
        r.aborted, r.aborted_t = True, r.aborted_t or line.t
    if m := log_lines.PG_STATUS.search(text):
        r.enqueued, r.last_completed = int(m.group(1)), int(m.group(2))
    if log_lines.DETAIL.search(text):
        r.detail = text[log_lines.DETAIL.search(text).start() :]
    if log_lines.TRACEBACK.match(text):
        r._in_traceback, r.call, r._agent = True, None, False
        return
    if r._in_traceback and log_lines.AGENT_FRAME.search(text):
        r._agent = True  # torchrun's agent raised it (its rendezvous, its store)
    if r._in_traceback and (m := log_lines.DIST_FRAME.search(text)):
        r.call = m.group(1)  # the innermost torch.distributed frame so far
    if r._in_traceback and (m := log_lines.EXCEPTION.match(text)):
        r._in_traceback = False
        said = f"{m.group(1)}: {m.group(2)}" if m.group(2) else m.group(1)
        if m.group(1) in LAUNCHERS:
            return
        if r._agent:
            c.agent_error = c.agent_error or said
            return
        lost = consequence(said, bool(c.peers_lost))
        if lost:
            r.lost = r.lost or lost
        elif not r.detail or log_lines.DETAIL.search(said):
            r.exception = said
        _when(r, line)
    elif not r._in_traceback and (lost := consequence(text, bool(c.peers_lost))):
        r.lost = r.lost or lost
        _when(r, line)


def _when(r: Rank, line: log_lines.Line) -> None:
    if r.t is None and line.t is not None:
        r.t = line.t
    if r.clock is None and line.clock is not None:
        r.clock = line.clock
