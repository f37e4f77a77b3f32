"""Log sets as failed cluster jobs leave them, written from their producers' own format strings
for a named torch version (the strings and the versions they changed in: ProcessGroupNCCL.cpp's
checkTimeout / watchdogHandler / createLogPrefix, c10/util/Logging.cpp's MessageLogger,
distributed_c10d.py's _distributed_excepthook, elastic/multiprocessing/errors/__init__.py's
ChildFailedError.format_msg, gloo's pair.cc). A test builds a folder of <pod>.log files (and
pods.yaml) from them and reads it with `make repro`."""

from __future__ import annotations

from pathlib import Path

import yaml


def v(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def c10(
    version: str,
    rank: int | None,
    msg: str,
    sev: str = "E",
    where: str = "ProcessGroupNCCL.cpp:632",
) -> str:
    """A C++ line of c10's logger: the [rankN]: prefix from 2.2; the time from 2.4 (month not
    zero-padded, then nanoseconds of the monotonic clock)."""
    head = (
        f"[{sev} {where}] " if v(version) < (2, 4) else f"[{sev}1205 02:07:08.408296746 {where}] "
    )
    prefix = f"[rank{rank}]:" if rank is not None and v(version) >= (2, 2) else ""
    return prefix + head + msg


def pg(version: str, rank: int) -> str:
    """ProcessGroupNCCL::createLogPrefix of the default group, by version."""
    if v(version) < (2, 3):
        return f"[Rank {rank}] "
    if v(version) < (2, 4):
        return f"[PG 0 Rank {rank}] "
    if v(version) < (2, 5):
        return f"[PG 0 (default_pg) Rank {rank}] "
    return f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] "


def watchdog(version: str, rank: int, seq: int, op: str = "ALLREDUCE") -> list[str]:
    """What a rank whose collective timed out prints (ProcessGroupNCCL.cpp)."""
    work = f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000)"
    timeout = f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for 600081 milliseconds before timing out."
    out = [c10(version, rank, timeout)]
    p = pg(version, rank)
    if (2, 3) <= v(version) < (2, 4):
        out.append(
            c10(
                version,
                rank,
                f"{p}Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.",
            )
        )
    elif (2, 4) <= v(version) < (2, 6):
        out.append(
            c10(
                version,
                rank,
                f"{p}Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.",
            )
        )
    elif v(version) >= (2, 6):
        out.append(
            c10(
                version,
                rank,
                f"{p} failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, last completed work: {seq - 1}",
            )
        )
    out += [
        c10(
            version,
            rank,
            f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        ),
        c10(
            version,
            rank,
            f"[Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
        ),
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {p}Process group watchdog thread terminated with exception: {timeout}",
    ]
    return out


def traceback(
    version: str, rank: int, error: str, call: str = "all_reduce", user: str = "train.py"
) -> list[str]:
    """A rank's uncaught exception; [rankN]: on every line from torch 2.3 (the excepthook)."""
    lines = [
        "Traceback (most recent call last):",
        f'  File "/src/{user}", line 88, in <module>',
        "    main()",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83, in wrapper',
        "    return func(*args, **kwargs)",
        f'  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252, in {call}',
        "    work.wait()",
        error,
    ]
    if v(version) >= (2, 3):
        return [f"[rank{rank}]: {x}" for x in lines]
    return lines


def child_failed(version: str, failures: list[tuple[int, int, int, str]], root: int) -> list[str]:
    """torchrun's end: (rank, local rank, exit code, time) each; `root`: the one it names first."""
    out = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * 60,
        "train.py FAILED",
        "-" * 60,
        "Failures:",
    ]

    def block(i, rank, local, code, t):
        sig = {-9: "  (SIGKILL)", -15: "  (SIGTERM)", -6: "  (SIGABRT)"}.get(code, " ")
        sig = sig if v(version) >= (2, 12) else ""
        trace = (
            f"Signal {-code} received by PID {100 + rank}"
            if code < 0
            else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        )
        return [
            f"[{i}]:",
            f"  time      : {t}",
            "  host      : pod",
            f"  rank      : {rank} (local_rank: {local})",
            f"  exitcode  : {code} (pid: {100 + rank}){sig}",
            "  error_file: <N/A>",
            f"  traceback : {trace}",
        ]

    others = [f for f in failures if f[0] != root]
    for i, f in enumerate(others, 1):
        out += block(i, *f)
    if not others:
        out.append("  <NO_OTHER_FAILURES>")
    out += ["-" * 60, "Root Cause (first observed failure):"]
    out += block(0, *next(f for f in failures if f[0] == root))
    return out + ["=" * 60]


def agent(version: str, msg: str, sev: str = "W") -> str:
    """A line of torchrun's agent (torch's Python logger)."""
    if v(version) < (2, 3):
        level = {"W": "WARNING", "E": "ERROR", "I": "INFO"}[sev]
        return f"[2024-12-05 02:07:09,193] torch.distributed.elastic.multiprocessing.api: [{level}] {msg}"
    return f"{sev}1205 02:07:09.142000 18204 torch/distributed/elastic/multiprocessing/api.py:1028] {msg}"


def tqdm(step: int, total: int) -> str:
    """The HF Trainer's progress bar (tqdm's format_meter), glued by \\r as tqdm writes it."""
    pct = 100 * step // total
    return f" {pct:2d}%|#         | {step}/{total} [00:40<02:10,  1.48s/it]\r"


def pod(
    name: str,
    node_rank: int,
    nproc: int,
    nnodes: int,
    code: int | None,
    why: str = "Error",
    finished: str = "2024-12-05T02:07:10Z",
    **status,
) -> dict:
    """A Pod object as `kubectl get pod -o yaml` shows it (the fields make repro reads)."""
    env = [
        {"name": "PET_NODE_RANK", "value": str(node_rank)},
        {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
        {"name": "PET_NNODES", "value": str(nnodes)},
    ]
    cs = {"name": "pytorch", "restartCount": 0, "ready": False, "image": "x", "imageID": "x"}
    if code is None:
        cs["state"] = {"waiting": {"reason": status.pop("waiting", "ContainerCreating")}}
        phase = "Pending"
    else:
        cs["state"] = {
            "terminated": {
                "exitCode": code,
                "reason": why,
                "finishedAt": finished,
                "startedAt": status.pop("started", "2024-12-05T01:00:00Z"),
            }
        }
        phase = "Failed" if code else "Succeeded"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "pytorch", "image": "x", "env": env}]},
        "status": {"phase": phase, "containerStatuses": [cs], **status},
    }


def write(folder: Path, logs: dict[str, list[str]], pods: list[dict] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in logs.items():
        (folder / f"{name}.log").write_text("\n".join(lines) + "\n")
    if pods:
        (folder / "pods.yaml").write_text(
            yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": pods})
        )
    return folder


# --- Log sets of whole jobs, and what `make repro` reads from them ---------------------------


def watchdog_job(
    version: str, silent: int, world: int = 4, nproc: int = 2, seq: int = 1580
) -> dict:
    """Every rank but `silent` times out in one all_reduce (NCCL); torchrun's summaries name
    a rank that timed out as the root cause, and SIGTERM the silent one (its pod's agent)."""
    logs = {}
    for node in range(world // nproc):
        name = "sft-master-0" if node == 0 else f"sft-worker-{node - 1}"
        lines, fails = [tqdm(151, 1000)] if node == 0 else [], []
        for local in range(nproc):
            rank = node * nproc + local
            if rank == silent:
                lines.append(
                    f"[rank{rank}]:[W1205 02:00:00.1 ProcessGroupNCCL.cpp:4115] a warning of its own"
                )
                fails.append((rank, local, -15, "2024-12-05_02:07:09"))
            else:
                lines += watchdog(version, rank, seq)
                fails.append((rank, local, -6, "2024-12-05_02:07:08"))
        root = next((f[0] for f in fails if f[2] == -6), fails[0][0])
        lines += (
            [agent(version, f"Sending process {100 + silent} closing signal SIGTERM")]
            if any(f[0] == silent for f in fails)
            else []
        )
        lines += child_failed(version, fails, root)
        logs[name] = lines
    return logs


def judged(folder) -> dict:
    """The record `make repro` makes of the log set in `folder` (no replay), as repro.json
    holds it."""
    from tuning.harness.clusterlogs import judge

    rec, _, _ = judge.judge(folder)
    return rec.to_json()


def verdict_of(folder) -> tuple[str, list[int]]:
    """(class, culprits) of the verdict on `folder`; (None, []) where there is none."""
    v = judged(folder)["verdict"] or {"class": None, "culprits": []}
    return v["class"], v["culprits"]
