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

import functools
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import NamedTuple


class Line(NamedTuple):  # a tuple: millions of them are made for a large log
    text: str  # what is left after the prefixes
    rank: int | None  # the global rank it names, where it names one
    local: int | None  # torchrun's tee prefix: the local rank
    t: float | None  # unix seconds, where a full date is known (kubectl --timestamps)
    clock: str | None  # "MMDD HH:MM:SS" of a header without a year, else None


@functools.lru_cache(maxsize=4096)  # a log's lines share their seconds: parse each once
def _utc(text: str, fmt: str) -> float:
    return datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp()


# Every prefix of the docstring at once, each optional, in that order: a log of millions of
# lines is split by one pass of the regex engine, not a Python loop of matches. The parts:
# kubectl's RFC 3339 time; `accelerate test`'s "stdout: " / "stderr: " (accelerate/test_utils/
# testing.py, execute_subprocess_async); torchrun's tee `[default0]:` (not `[rank3]:`); the
# rank; c10's header (2.4+ with its time, 2.1-2.3 without) or glog's; Python's logger of
# torch 2.1-2.2 (`[2024-04-10 16:02:56,193] torch.distributed...: [WARNING] `) or DeepSpeed's
# (deepspeed/utils/logging.py: `[2024-01-01 00:00:00,123] [INFO] `).
LINE = re.compile(
    r"^(?:(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?Z )?"
    r"(?:std(?:out|err): ?)?"
    r"(?:\[(?!rank\d)[A-Za-z_]+?(?P<local>\d+)\]:)?"
    r"(?:\[rank(?P<rank>\d+)\]: ?)?"
    r"(?:\[[FEWIV](?P<md>\d{3,4}) (?P<hms>\d\d:\d\d:\d\d)\.\d+ [\w.]+:\d+\] "
    r"|\[[FEWIV] [\w.]+:\d+\] "
    r"|[FEWIV](?P<gmd>\d{4}) (?P<ghms>\d\d:\d\d:\d\d)\.\d+ +\d+ [\w./-]+:\d+\] )?"
    r"(?:\[(?P<py>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(?P<ms>\d+)\] (?:[\w.]+: \[\w+\]|\[[A-Z]+\]) )?"
    r"(?P<text>.*)$",
    re.M,
)


def split(text: str) -> Iterator[Line]:
    """The log's lines with their prefixes read off (tqdm's \\r ends a line too)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    for m in LINE.finditer(text):
        if m.end() == m.start() or not m.group(0).strip():
            continue
        ts, frac, local, rank, md, hms, gmd, ghms, py, ms, rest = m.groups()
        t = _utc(ts, "%Y-%m-%dT%H:%M:%S") + float(f"0.{frac or 0}") if ts else None
        if py and t is None:
            t = _utc(py, "%Y-%m-%d %H:%M:%S") + int(ms) / 1000
        clock = f"{int(md):04d} {hms}" if md else f"{gmd} {ghms}" if gmd else None
        yield Line(
            rest,
            int(rank) if rank else None,
            int(local) if local else None,
            t,
            clock,
        )


# --- What a line says ---------------------------------------------------------------------------

# torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, WorkNCCL::checkTimeout and operator<< of
# WorkNCCL (the same wording in torch 2.1-2.13; NumelIn/NumelOut from 2.1). The [Rank N] is the
# rank in that process group; [PG ID 0 PG GUID 0(default_pg) Rank N] (2.5+) says which group.
WATCHDOG = re.compile(
    r"(?:\[(?:PG [^\]]*?)?Rank (\d+)\]\s*)?Watchdog caught collective operation timeout: "
    r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)"
)
# ... rethrown on the watchdog's thread (ProcessGroupNCCL, torch 1.13-2.x, where async error
# handling tears down): std::terminate, whose handler (libstdc++'s __verbose_terminate_handler)
# prints "terminate called after throwing an instance of '...'" and "  what():  <the message>",
# then SIGABRT ends the process; its heartbeat monitor's (2.3+) "Terminating the process after
# attempting to dump debug info" ends it too
TERMINATED = re.compile(r"^\s*what\(\):\s|Terminating the process after attempting to dump")
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
# ... and, where the worker ran under @record, its error file's traceback indented beneath
# "traceback :", ending in the exception: "  RuntimeError: CUDA out of memory. ..."
FAILURE_ERROR = re.compile(r"^ {2,}(?:[a-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception)): ?(.*)$")
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
# (2.0-2.1: "timed out after 60000ms while trying to connect to (host, port)"; 2.2+: the
# duration as fmt prints std::chrono: "after 900s", "after 1800000ms")
CONNECT = re.compile(
    r"client socket has (?:timed out after \d+m?s while trying to connect|failed to "
    r"connect to any network address of) (?:to )?\(([^,]+), (\d+)\)"
)
# tqdm's bar (tqdm/std.py format_meter: "{n}/{total} [") as the HF Trainer's ProgressCallback
# draws it (transformers/trainer_callback.py); the first bar's total is the run's max_steps
TQDM = re.compile(r"^\s*\d+%\|[^|]*\|\s*(\d+)/(\d+) \[")  # no description: the Trainer's own
# ProgressCallback.on_log: str() of the logs dict: a step's loss ({'loss': ...}), the end
# ({'train_runtime': ...}); transformers 5 prints each float as text ('3.672')
HF_LOSS = re.compile(r"\{'loss': ")
# A labelled bar of the training loop (torchtune's recipes, TRL's and others' own loops):
# "Train:  20%|##        | 230/1142 [" or "Epoch 1: ..."; a bar labelled otherwise (Map,
# Loading checkpoint shards, Tokenizing, eval) counts data or files, not steps
TQDM_LABEL = re.compile(r"^\s*(?P<label>[^|%\r]*?)\s*:?\s+\d+%\|[^|]*\|\s*(\d+)/(\d+) \[")
TRAINING_LABEL = re.compile(r"(?i)\b(train\w*|epoch\w*|steps?|iter\w*)\b")
# torchtune's recipes (recipes/full_finetune_distributed.py and the others, 0.x):
# pbar.set_description(f"{curr_epoch + 1}|{self.global_step}|Loss: {loss_to_log}")
TORCHTUNE = re.compile(r"(?:^|\s)(\d+)\|(\d+)\|Loss: ")
# ms-swift's trainer log (swift/trainers/mixin.py, 2.x-3.x): 'global_step/max_steps': '10/1000'
SWIFT = re.compile(r"'global_step/max_steps': '(\d+)/(\d+)'")
# Megatron-LM's training_log (megatron/training/training.py): " iteration      230/   10000 |"
MEGATRON = re.compile(r"\biteration\s+(\d+)/\s*(\d+) \|")
# DeepSpeed's engine (runtime/engine.py _take_model_step, log_dist): "step=10, skipped=0, lr=..."
DS_STEP = re.compile(r"\bstep=(\d+), skipped=\d+, lr=")
# mmengine's LoggerHook, iteration-based loops: "Iter(train) [  50/1000]"
MMENGINE = re.compile(r"Iter\(train\) \[\s*(\d+)/(\d+)\]")
# this harness's trainer (tuning/container/sft/metrics.py): "sft_trainer: step 12/30 loss 3.0662"
OURS_STEP = re.compile(r"^sft_trainer: step (\d+)/(\d+) ")
HF_END = re.compile(r"\{'train_runtime': ")


def progress(text: str) -> tuple[int, int | None] | None:
    """(step, of how many) where a trainer's progress line says it, else None."""
    if m := TQDM.match(text) or OURS_STEP.match(text):
        return int(m.group(1)), int(m.group(2))
    if (m := TQDM_LABEL.match(text)) and TRAINING_LABEL.search(m.group("label")):
        if not re.search(r"(?i)eval|valid|test", m.group("label")):
            return int(m.group(2)), int(m.group(3))
    if m := TORCHTUNE.search(text):
        return int(m.group(2)), None
    for pattern in (SWIFT, MEGATRON, MMENGINE):
        if m := pattern.search(text):
            return int(m.group(1)), int(m.group(2))
    if m := DS_STEP.search(text):
        return int(m.group(1)), None
    return None


# --- How many ranks, and where: what launchers and trainers print of the world ---------------

# torchrun's agent, when the rendezvous completes (elastic/agent/server/api.py,
# _rendezvous / _log_rendezvous: "group_rank=1 group_world_size=2 ... local_ranks=[0, 1]
# role_ranks=... global_ranks=[2, 3] role_world_sizes=[4, 4] global_world_sizes=[4, 4]")
GROUP_RANK = re.compile(r"\bgroup_rank=(\d+)")
GLOBAL_RANKS = re.compile(r"\bglobal_ranks=\[([\d, ]+)\]")
GLOBAL_WORLD = re.compile(r"\bglobal_world_sizes=\[(\d+)")
# DeepSpeed's launcher (deepspeed/launcher/launch.py main): "nnodes=2, num_local_procs=8,
# node_rank=1" and "dist_world_size=16"
DS_NODE = re.compile(r"\bnnodes=(\d+), num_local_procs=(\d+), node_rank=(\d+)")
DS_WORLD = re.compile(r"\bdist_world_size=(\d+)")
# What trainers print of the world: accelerate's PartialState repr ("Num processes: 8"),
# LlamaFactory's and others' "world size: 8" / "world_size=8", Megatron's "using world size: 16"
# (not "tensor-model-parallel size"), NCCL's init (init.cc: "comm 0x... rank 3 nranks 8 cudaDev")
WORLD_SAID = re.compile(
    r"(?<!parallel )(?<![\w-])world[ _]size\s*[:=]\s*(\d+)|\bNum processes: (\d+)"
    r"|\brank \d+ nranks (\d+)\b"
    # Lightning's DDP (lightning/fabric/utilities/distributed.py _init_dist_connection):
    # "Initializing distributed: GLOBAL_RANK: 6, MEMBER: 7/8" and "Starting with 8 processes"
    r"|\bMEMBER: \d+/(\d+)|All distributed processes registered\. Starting with (\d+) processes"
    # accelerate's notebook_launcher (accelerate/launchers.py): "Launching training on 8 GPUs."
    # (0.4-0.5: "Launching a training on 7 GPUs.")
    r"|\bLaunching (?:a )?training on (\d+) (?:GPUs|CPU|processes)",
    re.I,
)
# the words one of the world's patterns needs (a line with none is not searched for them)
WORLD_WORDS = re.compile(
    r"group_rank|global_|nnodes=|dist_world|orld[ _]size|Num processes|nranks|Launching|MEMBER"
    r"|Starting with|batch size|Accumulation"
)
# the HF Trainer's "***** Running training *****" block (trainer.py _inner_training_loop):
# the total batch over the per-device batch and accumulation is the world size
HF_BATCH = re.compile(r"Instantaneous batch size per device = ([\d,]+)")
HF_TOTAL = re.compile(
    r"Total train batch size \(w\. parallel, distributed & accumulation\) = ([\d,]+)"
)
HF_ACCUM = re.compile(r"Gradient Accumulation steps = ([\d,]+)")
# torchrun's agent when a worker fails (elastic/multiprocessing/api.py, _poll, 2.0-2.13):
# "failed (exitcode: -6) local_rank: 3 (pid: 394) of binary: /usr/bin/python"
AGENT_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: \d+\)")
# Lightning's "Initializing distributed: GLOBAL_RANK: 6, MEMBER: 7/8": that process's rank
LIGHTNING_RANK = re.compile(r"Initializing distributed: GLOBAL_RANK: (\d+), MEMBER")
# a trainer's own "Process rank: N": LlamaFactory's (hparams/parser.py) is the global rank,
# with the world beside it ("Process rank: 3, world size: 8, device: cuda:3"); the HF examples'
# (run_clm.py and the others: training_args.local_rank) is the LOCAL rank ("Process rank: 3,
# device: cuda:3, n_gpu: 1")
PROCESS_RANK = re.compile(r"\bProcess rank: (\d+), world size: \d+")
# accelerate's PartialState.__repr__ (accelerate/state.py, 0.20-1.x), which scripts log on every
# process (`logger.info(accelerator.state, main_process_only=False)`): "Num processes: 4",
# "Process index: 2" (the global rank), "Local process index: 2", each on a line of its own
ACCEL_INDEX = re.compile(r"^(Local )?[Pp]rocess index: (\d+)$")
LOCAL_PROCESS_RANK = re.compile(r"\bProcess rank: (-?\d+), device")
# torch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp): "Tried to allocate 896.00
# MiB (GPU 2; 79.17 GiB total capacity; ...": the device, a worker's local rank where each
# worker holds the GPU of its local rank
CUDA_OOM_GPU = re.compile(r"CUDA out of memory\..*?\(GPU (\d+);")

# --- Launchers' own lines of their workers -----------------------------------------------------

# torch/distributed/elastic/multiprocessing/api.py SubprocessContext._close (2.0-2.13):
# logger.warning("Sending process %s closing signal %s", pid, sig): the agent stops a worker
# still running after another failed. The number is a PID, not a rank.
CLOSING = re.compile(r"Sending process (\d+) closing signal (SIG\w+)")
# DeepSpeed's launcher (deepspeed/launcher/launch.py sigkill_handler, 0.9-0.16): "Killing
# subprocess <pid>" for each, then "<cmd> exits with return code = <rc>": rc is the first failed
# worker's, but cmd is the spawn loop's variable, the LAST worker's command (--local_rank=N of
# the last local rank, unless --no_local_rank), whichever worker failed
DS_KILLING = re.compile(r"\[launch\.py:\d+:sigkill_handler\] Killing subprocess \d+")
DS_EXIT = re.compile(r"\[launch\.py:\d+:sigkill_handler\] (.*) exits with return code = (-?\d+)")
DS_LOCAL = re.compile(r"--local_rank=(\d+)")
# torch/multiprocessing/spawn.py (1.x-2.13): ProcessRaisedException's message is
# "\n\n-- Process N terminated with the following error:\n" + the child's traceback;
# ProcessExitedException's "process N terminated with signal SIGKILL" / "with exit code 1"
SPAWN_RAISED = re.compile(r"^-- Process (\d+) terminated with the following error:")
SPAWN_EXITED = re.compile(r"process (\d+) terminated with (?:signal (SIG\w+)|exit code (-?\d+))")
# a traceback of torchrun's own agent (torch/distributed/run.py, launcher/api.py, the elastic
# agent and rendezvous): its exception (DistNetworkError, DistStoreError, RendezvousError) is
# the launcher's, not a rank's
AGENT_FRAME = re.compile(
    r"torch/distributed/(?:run\.py|launcher/api\.py|elastic/(?:agent|rendezvous)/)|bin/torchrun"
)

# --- A peer lost, as NCCL says it ------------------------------------------------------------

# NCCL's WARN lines (src/misc/socket.cc, src/transport/net_ib.cc, src/proxy.cc, 2.10-2.21):
# "host:pid:tid [dev] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote
# peer node-3<56789>", "NET/IB : Got completion from peer 10.0.0.4<12345> with status=12",
# "[Proxy Service 3] Failed to execute operation Connect from rank 3, retcode 3"
NCCL_WARN = re.compile(r"NCCL WARN (.*)")
NCCL_PEER = re.compile(
    r"(?:remote peer|from peer|Connect to|connect to) (?:peer )?([\w.:-]+?)<\d+>"
)
# What a rank raises after NCCL lost a peer: torch's NCCL check (NCCLUtils.hpp) "unhandled
# system error", "ncclSystemError" and "ncclRemoteError", with NCCL's last error
NCCL_SYSTEM = re.compile(r"unhandled system error|ncclSystemError")
# A CUDA out-of-memory exception: the rank's own, not the kernel's OOM killer
CUDA_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError")
# c10d's TCPStore client (torch/csrc/distributed/c10d/TCPStore.cpp, Socket::recv in 2.3+):
# the store's host is gone
STORE_LOST = re.compile(
    r"[Ff]ailed to recv, got 0 bytes|Connection was likely closed|recvBytes failed|"
    r"Stop_waiting response is expected"
)

# OURS: tuning/container/launch.py's own line (this harness's containers and pods)
OURS = re.compile(r"harness-launch: accelerate launch ")
MARKERS = (
    WATCHDOG,
    CLOSING,
    DS_EXIT,
    DS_KILLING,
    SPAWN_RAISED,
    SPAWN_EXITED,
    NCCL_WARN,
    NCCL_SYSTEM,
    STORE_LOST,
    WORLD_SAID,
    GROUP_RANK,
    TQDM_LABEL,
    TORCHTUNE,
    SWIFT,
    MEGATRON,
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


# Words one of the patterns above needs: a line with none of them is counted, never searched
SALIENT = re.compile(
    "|".join(
        re.escape(w)
        for w in (
            "Watchdog", "last enqueued", "onnection", "Broken pipe", "Socket closed",
            "Timed out", "data size", "remote ", "ncclRemoteError", "aborted",
            "mismatch between", "Traceback", "File ", "rror", "xception", "Interrupt",
            "Exit", "Failure", "Root Cause", "time  ", "rank  ", "exitcode", "death signal",
            "addresses", "socket", "{'", "harness-launch", "closing signal", "sigkill_handler",
            "-- Process", "terminated with", "group_rank", "global_", "nnodes=", "orld",
            "Num processes", "nranks", "batch size", "Accumulation", "Process rank",
            "NCCL WARN", "out of memory", "recv", "Stop_waiting", "torch/distributed",
            "torchrun", "%|", "|Loss: ", "iteration", "step", "Iter(", "Launching",
            "MEMBER", "processes", "local_rank", "rocess index", "what()", "Terminating",
        )
    )
)  # fmt: skip


def scan(text: str) -> list[tuple[Line, bool]]:
    """Each line, and whether it holds a word some pattern needs (SALIENT): read once, for the
    reads that place a pod and then its ranks."""
    return [(x, SALIENT.search(x.text) is not None) for x in split(text)]


def known(text: str) -> bool:
    """A line some producer above wrote."""
    return any(p.search(text) for p in MARKERS)
