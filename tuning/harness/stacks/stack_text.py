"""Reading one dump of a rank's stacks (faulthandler's text, as tuning/container/rank/stack_dump.py
has a rank write it) into threads and frames, and saying in one line where the rank is."""

from __future__ import annotations

import json
import re

from tuning.container.rank.stack_dump import END, FR_PREFIX

# CPython's faulthandler (Python/traceback.c): a thread header, then its frames, newest first.
_THREAD = re.compile(
    r"^(Current thread|Thread) (0x[0-9a-f]+)(?: \[.*\])? \(most recent call first\):"
)
# Between a collective and whoever called it: torch itself and the harness's wrappers
_WRAPPING = re.compile(r"-packages/torch/|^<frozen |/opt/harness-launch/|/desync\.py$")
_FRAME = re.compile(r'^  File "(?P<file>.*)", line (?P<line>\d+|\?\?\?) in (?P<func>.*)$')
_DIST = "torch/distributed/"
# torch.distributed packages whose Python computes between the collectives it calls
_BETWEEN = re.compile(r"torch/distributed/(fsdp|tensor)/")
# Not the user's code: the standard library, torch and the Hugging Face stack (a user's own
# package in site-packages is theirs: fms's tuning), frozen modules, the harness's wrapper and
# its desync faults' wrapper (tuning/container/rank/desync.py: the call it wraps is the user's).
_LIBS = "torch|transformers|accelerate|peft|trl|datasets|safetensors|huggingface_hub"
_NOT_USER = re.compile(
    rf"/lib/python3\.\d+/(?!site-packages/|dist-packages/)|-packages/({_LIBS})/|^<frozen "
    r"|/opt/harness-launch/|/tuning/stack_dump\.py$|/desync\.py$"
)


def parse(text: str) -> dict:
    """{"threads": [{"id": int, "current": bool, "frames": [{file, line, func}]}],
    "collectives": [flight recorder entries], "complete": bool} from one dump's text."""
    threads, collectives = [], []
    for raw in text.splitlines():
        head = _THREAD.match(raw)
        frame = _FRAME.match(raw)
        if head:
            threads.append(
                {"id": int(head.group(2), 16), "current": head.group(1) != "Thread", "frames": []}
            )
        elif frame and threads:
            line = frame.group("line")
            threads[-1]["frames"].append(
                {
                    "file": frame.group("file"),
                    "line": int(line) if line.isdigit() else None,
                    "func": frame.group("func"),
                }
            )
        elif raw.startswith(FR_PREFIX):
            try:
                collectives.append(json.loads(raw[len(FR_PREFIX) :]))
            except ValueError:
                pass
    return {"threads": threads, "collectives": collectives, "complete": END in text}


def main_thread(parsed: dict, ident: int | None = None) -> dict | None:
    """The main thread: the one whose id the rank wrote down, else the one that ran the
    signal (Linux gives a process's signal to its main thread first), else the first."""
    threads = parsed["threads"]
    by_id = [t for t in threads if ident is not None and t["id"] == ident]
    current = [t for t in threads if t["current"]]
    return (by_id or current or threads or [None])[0]


def where(frame: dict) -> str:
    return f"{frame['file']}:{frame['line']}"


def position(parsed: dict, ident: int | None = None) -> dict | None:
    """Where the main thread is: {"call": the innermost torch.distributed function, or None
    outside torch.distributed; "dist": that frame; "user": the user's innermost frame; "top":
    the innermost frame; "caller": the frame that called into torch for that collective (a
    library's or the user's)}. None: no Python frame."""
    thread = main_thread(parsed, ident)
    if thread is None or not thread["frames"]:
        return None
    frames = thread["frames"]
    dist = next((f for f in frames if _DIST in f["file"]), None)
    if dist is not None and any("/torch/" not in f["file"] for f in frames[: frames.index(dist)]):
        # torch.distributed called out of torch (FSDP's hooks run in torch/distributed/fsdp, and
        # call a user's code or slow-main's work from there): busy there, not in a collective
        dist = None
    busy = parsed.get("collectives") and pending(parsed) is None
    if dist is not None and _BETWEEN.search(dist["file"]) and busy:
        # FSDP's and DTensor's own Python (hooks, copies, casts) runs between collectives; there
        # with none pending in its flight recorder, a rank is busy, not waiting: a throttled
        # rank in FSDP's post_backward was read as calling a collective there
        dist = None
    user = next((f for f in frames if not _NOT_USER.search(f["file"])), None)
    outer = frames[frames.index(dist) + 1 :] if dist else []
    caller = next((f for f in outer if not _WRAPPING.search(f["file"])), None)
    return {
        "call": dist["func"] if dist else None,
        "dist": dist,
        "user": user,
        "top": frames[0],
        "caller": caller,
    }


def pending(parsed: dict) -> dict | None:
    """The newest flight recorder entry not done. gloo's recorder has no point-to-point
    entries, so a rank in recv shows none rather than an older, finished all_reduce."""
    waiting = [c for c in parsed["collectives"] if c.get("state") != "done"]
    return waiting[-1] if waiting else None


def summary(rank: int, parsed: dict, ident: int | None = None) -> str:
    """One line: "rank 0: waiting in all_reduce (gloo, seq 7, pending) at train.py:12
    (torch/distributed/distributed_c10d.py:2950)": the main thread's innermost torch.distributed
    frame, the flight recorder's newest pending collective, the user's innermost frame; outside
    torch.distributed, the user's innermost frame (else the main thread's innermost)."""
    pos = position(parsed, ident)
    if pos is None:
        return f"rank {rank}: dumped no Python frame"
    dist, user = pos["dist"], pos["user"]
    if dist is None:
        top = user or pos["top"]
        return f"rank {rank}: in {top['func']} at {where(top)}"
    last = pending(parsed)
    # c10d records the op it ran, which may differ from the call (FSDP's reduce_scatter on gloo)
    op = f" {last['op']}" if last and last["op"] != dist["func"] else ""
    fr = f" ({last['backend']}{op}, seq {last['seq']}, {last['state']})" if last else ""
    at = f" at {where(user)}" if user else ""
    inner = dist["file"][dist["file"].find(_DIST) :]
    return f"rank {rank}: waiting in {dist['func']}{fr}{at} ({inner}:{dist['line']})"


# Slow phases a healthy rank can spend minutes in, by the functions on its main thread (the
# innermost match wins): the HF Trainer's and torch's own names.
PHASES = (
    (
        "saving a checkpoint",
        {
            "_save_checkpoint",
            "save_model",
            "_save",
            "save_pretrained",
            "_save_optimizer_and_scheduler",
            "save_state",
            "save_file",
        },
    ),
    ("evaluating", {"evaluate", "evaluation_loop", "prediction_step"}),
    (
        "loading the model",
        {
            "from_pretrained",
            "_load_pretrained_model",
            "load_state_dict",
            "load_checkpoint",
            "_load_from_checkpoint",
        },
    ),
    ("preparing the data", {"map", "load_dataset", "tokenize_examples", "load_examples"}),
    ("in a training step", {"training_step"}),
)


def phase(parsed: dict, ident: int | None = None) -> tuple[str, dict] | None:
    """(phase, its frame) of a rank's main thread, innermost first; None outside them all."""
    thread = main_thread(parsed, ident)
    for frame in thread["frames"] if thread else ():
        for name, funcs in PHASES:
            if frame["func"] in funcs:
                return name, frame
    return None


def slow_phases(taken: dict) -> str:
    """For a stall dump: the ranks found in a slow phase ("rank 0 saving a checkpoint (in
    _save_checkpoint at trainer.py:3100)"), "" when none is: then it may be a hang."""
    out = []
    for r, x in sorted(taken["ranks"].items()):
        found = phase(x) if x.get("threads") else None
        if found:
            name, frame = found
            out.append(f"rank {r} {name} (in {frame['func']} at {where(frame)})")
    return "; ".join(out)
