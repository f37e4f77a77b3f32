"""One container's log read line by line: which rank each line is, when, and what it says.
Every format is its producer's, read from that producer's source (the upstream file and
function are named at each pattern); a line no pattern knows is skipped, never guessed at.

Prefixes, outermost first, each optional (a line may carry any of them):
- `kubectl logs --timestamps`: RFC 3339 with nanoseconds and a Z (the kubelet's CRI log).
- torchrun's tee prefix, `[default0]:` (torch/distributed/elastic/multiprocessing/tail_log.py,
  TailLog: `[{role}{local_rank}]:`): the LOCAL rank.
- the rank: `[rank3]:` (c10's logger from torch 2.2: c10::SetGlobalRank; the Python excepthook
  `_distributed_excepthook` of torch/distributed/distributed_c10d.py from 2.3): the GLOBAL rank.
- a header: c10's `[E1205 02:07:08.408296 ProcessGroupNCCL.cpp:632] ` (c10/util/Logging.cpp,
  MessageLogger; torch 2.1-2.3 print `[E ProcessGroupNCCL.cpp:475] ` with no time), glog's
  `E1028 12:13:38.405081 632355 file.cc:843] `, or torch's Python logger, `E1205 14:45:26.780000
  1 torch/distributed/...py:1002] ` from 2.3 (torch/_logging/_internal.py TorchLogsFormatter)
  and `[2024-04-10 16:02:56,193] torch.distributed...: [WARNING] ` in 2.1-2.2.
tqdm's bars end in \\r, so a line is also cut at \\r, and patterns search inside a line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

KUBECTL_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z ")
TEE = re.compile(r"^\[([A-Za-z_]+?)(\d+)\]:")  # [default0]: ([rankN]: is told apart by name)
RANK = re.compile(r"^\[rank(\d+)\]: ?")
C10 = re.compile(
    r"^\[([FEWIV])(\d{3,4}) (\d\d:\d\d:\d\d)\.\d+ [\w.]+:\d+\] |^\[([FEWIV]) [\w.]+:\d+\] "
)
GLOG = re.compile(r"^([FEWIV])(\d{4}) (\d\d:\d\d:\d\d)\.\d+ +\d+ [\w./-]+:\d+\] ")
PYLOG_21 = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\] [\w.]+: \[\w+\] ")


@dataclass(frozen=True)
class Line:
    text: str  # what is left after the prefixes
    rank: int | None  # the global rank it names, where it names one
    local: int | None  # torchrun's tee prefix: the local rank
    t: float | None  # unix seconds, where a full date is known (kubectl --timestamps)
    clock: str | None  # "MMDD HH:MM:SS" of a header without a year, else None


def _utc(text: str, fmt: str) -> float:
    return datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp()


def split(text: str) -> list[Line]:
    """The log's lines with their prefixes read off."""
    out = []
    for raw in re.split(r"\r\n|\n|\r", text):
        if not raw.strip():
            continue
        t = clock = None
        m = KUBECTL_TS.match(raw)
        if m:
            t, raw = _utc(m.group(1), "%Y-%m-%dT%H:%M:%S"), raw[m.end() :]
        local = rank = None
        m = TEE.match(raw)
        if m and m.group(1) != "rank":
            local, raw = int(m.group(2)), raw[m.end() :]
        m = RANK.match(raw)
        if m:
            rank, raw = int(m.group(1)), raw[m.end() :]
        for header in (C10, GLOG):
            m = header.match(raw)
            if m:
                if m.group(2):
                    clock = f"{int(m.group(2)):04d} {m.group(3)}"
                raw = raw[m.end() :]
                break
        m = PYLOG_21.match(raw)
        if m:
            t = t or _utc(m.group(1), "%Y-%m-%d %H:%M:%S")
            raw = raw[m.end() :]
        out.append(Line(raw, rank, local, t, clock))
    return out


# --- What a line says ---------------------------------------------------------------------------

# torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, WorkNCCL::checkTimeout and operator<< of
# WorkNCCL (the same wording in torch 2.1-2.13; NumelIn/NumelOut from 2.1). The [Rank N] is the
# rank in that process group; [PG ID 0 PG GUID 0(default_pg) Rank N] (2.5+) says which group.
WATCHDOG = re.compile(
    r"(?:\[(?:PG [^\]]*?)?Rank (\d+)\]\s*)?Watchdog caught collective operation timeout: "
    r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)"
)
# c10d's OpType names (torch/csrc/distributed/c10d/Types.hpp) as the Python calls that issue them
OPS = {
    "ALLREDUCE": "all_reduce",
    "ALLGATHER": "all_gather",
    "_ALLGATHER_BASE": "all_gather_into_tensor",
    "REDUCE_SCATTER": "reduce_scatter",
    "_REDUCE_SCATTER_BASE": "reduce_scatter_tensor",
    "BROADCAST": "broadcast",
    "BARRIER": "barrier",
    "ALLTOALL": "all_to_all",
    "ALLTOALL_BASE": "all_to_all_single",
    "REDUCE": "reduce",
    "GATHER": "gather",
    "SCATTER": "scatter",
    "SEND": "send",
    "RECV": "recv",
    "COALESCED": "coalesced",
}
PG_NAME = re.compile(r"\[PG (?:ID )?(\S+)(?: PG GUID \S+?)?(?: ?\((\w+)\))? Rank \d+\]")
# ProcessGroupNCCL.cpp watchdogHandler's status line: "last enqueued ... last completed"
# (2.3: "Timeout at NCCL work: S, last enqueued NCCL work: E, last completed NCCL work: C";
# 2.4-2.5: "Exception (either an error or timeout) detected by watchdog at work: S, ...";
# 2.6+: "failure detected by watchdog at work sequence id: S PG status: last enqueued work: E,
# last completed work: C").
PG_STATUS = re.compile(
    r"last enqueued (?:NCCL )?work: (-?\d+),.*?last completed (?:NCCL )?work: (-?\d+)"
)
# gloo/transport/tcp/pair.cc (Pair::read, Pair::write) and unbound_buffer.cc (waitRecv/waitSend),
# as torch's gloo raises them (a RuntimeError with the file and line).
GLOO_CLOSED = re.compile(r"Connection closed by peer")
GLOO_RESET = re.compile(r"Connection reset by peer|Broken pipe|Socket closed")
GLOO_TIMEOUT = re.compile(r"Timed out waiting (\d+)ms for (recv|send) operation to complete")
# gloo's size check (pair.cc, 2.10+): a peer sent more than this rank's buffer holds; raised as
# gloo::EnforceNotMet on gloo's own thread, it ends the process (std::terminate, SIGABRT)
GLOO_SIZE = re.compile(r"Received data size doesn't match expected size")
# NCCL's errors (torch/csrc/distributed/c10d/NCCLUtils.hpp, C10D_NCCL_CHECK; the text after
# the version is libnccl's ncclGetErrorString): a peer gone or the network.
NCCL_REMOTE = re.compile(
    r"remote process exited or there was a network error|ncclRemoteError"
    r"|NCCL communicator was aborted"
)
# torch/csrc/distributed/c10d/ProcessGroupWrapper.cpp (TORCH_DISTRIBUTED_DEBUG=DETAIL)
DETAIL = re.compile(r"Detected mismatch between collectives on ranks\. Rank \d+ is running")
# Python's traceback (Lib/traceback.py): the block's last line is "Type: message"
TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
# a frame of torch.distributed's own API in it ("File .../distributed_c10d.py", line 3252, in
# all_reduce): the collective the rank was in when it raised
DIST_FRAME = re.compile(r'torch/distributed/distributed_c10d\.py", line \d+, in (\w+)')
EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure))(?:: ?(.*))?$"
)
# torch/distributed/elastic/multiprocessing/errors/__init__.py, ChildFailedError.format_msg and
# _FAILURE_FORMAT_TEMPLATE (2.1-2.11; 2.12+ adds "  (SIGKILL)" after the pid)
CHILD_FAILED = re.compile(r"ChildFailedError")
ROOT_CAUSE = re.compile(r"^Root Cause \(first observed failure\):")
FAILURE_TIME = re.compile(r"^\s+time\s+: (\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d)")
FAILURE_RANK = re.compile(r"^\s+rank\s+: (\d+) \(local_rank: (\d+)\)")
FAILURE_EXIT = re.compile(r"^\s+exitcode\s+: (-?\d+)")
# torch/distributed/elastic/agent/server/api.py SimpleElasticAgent.run: the agent itself got a
# signal from outside ("Signals.SIGTERM" on Python <= 3.10, "15" on 3.11+)
DEATH_SIGNAL = re.compile(r"Received (?:Signals\.)?(SIGTERM|SIGINT|SIGHUP|15|2|1) death signal")
# torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py -> TCPStore (c10d TCPStore.cpp):
# the master's store gave up waiting for the other nodes (torch 2.2+)
RDZV_WAIT = re.compile(
    r"Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients joined"
)
# torch/csrc/distributed/c10d/socket.cpp: the master's name or address never answered
RESOLVE = re.compile(r"network addresses of \(([^,]+), (\d+)\) cannot be retrieved")
CONNECT = re.compile(
    r"client socket has (?:timed out after \d+ms while trying to connect|failed to "
    r"connect to any network address of) (?:to )?\(([^,]+), (\d+)\)"
)
# tqdm's bar (tqdm/std.py format_meter: "{n}/{total} [") as the HF Trainer's ProgressCallback
# draws it (transformers/trainer_callback.py); the first bar's total is the run's max_steps
TQDM = re.compile(r"^\s*\d+%\|[^|]*\|\s*(\d+)/(\d+) \[")  # no description: the Trainer's own
# ProgressCallback.on_log: str() of the logs dict: a step's loss ({'loss': ...}), the end
# ({'train_runtime': ...}); transformers 5 prints each float as text ('3.672')
HF_LOSS = re.compile(r"\{'loss': ")
# this harness's trainer (tuning/sft/metrics.py): "sft_trainer: step 12/30 loss 3.0662"
OURS_STEP = re.compile(r"^sft_trainer: step (\d+)/(\d+) ")
HF_END = re.compile(r"\{'train_runtime': ")


# OURS: tuning/launch.py's own line (this harness's containers and pods)
OURS = re.compile(r"harness-launch: accelerate launch ")
MARKERS = (
    WATCHDOG,
    PG_STATUS,
    GLOO_CLOSED,
    GLOO_TIMEOUT,
    GLOO_SIZE,
    NCCL_REMOTE,
    DETAIL,
    CHILD_FAILED,
    FAILURE_RANK,
    DEATH_SIGNAL,
    RDZV_WAIT,
    RESOLVE,
    CONNECT,
    TQDM,
    HF_LOSS,
    HF_END,
    DIST_FRAME,
    OURS,
    OURS_STEP,
)


def known(text: str) -> bool:
    """A line some producer above wrote."""
    return any(p.search(text) for p in MARKERS)
