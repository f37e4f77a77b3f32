"""Every live rank's Python stacks, from the host: signal each rank process that registered a
dump (tuning/container/rank/stack_dump.py), wait for the dumps to settle, read them into one-line
summaries.

A rank is reached through its node: `docker exec` in its container (the rank's own pid
namespace and user, who owns the stacks file), or a shell on the host (LAYOUT=host). Only the
pids the ranks wrote down (<output>/stacks/rank<R>.pid.json) are signalled, and only while
that pid is still the process that wrote it (same start time): the launcher and torchrun's
agent never get SIGUSR1, whose default action would kill them. What cannot dump is said:
a paused container, a stopped (SIGSTOP) process, an exited one.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from tuning.container.rank import stack_dump
from tuning.harness.stacks import stack_text

SETTLE_S = 10.0  # longest wait for a dump's end line (a rank whose threads cannot run: none)
QUIET_S = 1.0  # without an end line, a dump that stopped growing this long is taken as is

# One rank: is the pid still the one that registered, is it running; then header + signal.
# A process seen stopped (T) is looked at STOP_LOOKS times, every 0.1 s: stopped every time and
# no CPU time used meanwhile, it is frozen and not signalled (the dump would come only once it
# is thawed); running in between, it is stopped and continued by something (a throttle running
# it 5 % of the time is seen stopped at most looks) and is signalled: its dump comes when it
# runs. CPU time is its threads' runtime in ns (/proc/<pid>/task/*/schedstat): the clock-tick
# counts (utime + stime) sample, and a throttled rank that ran 10 ms windows on a loaded machine
# gained no tick in a second and was called frozen. A subshell each: `exit` ends that rank's
# check only.
STOP_LOOKS = 10
_SIGNAL = """(p={pid}; f={file}; n=0
look() {{ st=$(cat /proc/$p/stat 2>/dev/null) || {{ echo "{rank} exited"; exit 0; }}
set -- ${{st##*) }}; s=$1; t=${{20}}; cpu=$(($12 + $13))
for g in /proc/$p/task/*/schedstat; do read ns x < "$g" && cpu=$((cpu+ns)); done 2>/dev/null; }}
look; cpu0=$cpu
[ "{ticks}" = None ] || [ "$t" = "{ticks}" ] || {{ echo "{rank} exited"; exit 0; }}
while [ "$s" = T ] || [ "$s" = t ]; do
n=$((n+1)); [ $n -ge {looks} ] && [ $cpu = $cpu0 ] && {{ echo "{rank} stopped"; exit 0; }}
[ $n -ge {looks} ] && break; sleep 0.1; look; done
case "$s" in Z|X) echo "{rank} exited";;
*) printf '%s\\n' {header} >> "$f" && kill -USR1 $p && echo "{rank} signalled $n";; esac)
"""


class Node:
    """Where some ranks run: `state()` is running/paused/exited (+ exit code), `sh(script)`
    runs a shell script there and returns its output."""

    def __init__(self, name: str, ranks: list[int], ctr=None):
        self.name, self.ranks, self.ctr = name, ranks, ctr

    def state(self) -> tuple[str, int | None]:
        if self.ctr is None:
            return "running", None
        self.ctr.reload()
        s = self.ctr.attrs["State"]
        if s.get("Paused") or s["Status"] == "paused":
            return "paused", None
        if s["Status"] in ("exited", "dead", "created"):
            return "exited", s.get("ExitCode")
        return "running", None

    def sh(self, script: str) -> str:
        if self.ctr is None:
            return subprocess.run(["sh", "-c", script], capture_output=True, text=True).stdout
        return self.ctr.exec_run(["sh", "-c", script]).output.decode(errors="replace")


def nodes_of(nodes) -> list[Node]:
    """The backend's nodes (lifecycle's ComposeNodes or HostNodes) as places to signal."""
    if hasattr(nodes, "all_containers"):
        return from_containers(nodes.all_containers())
    return [Node("host", list(range(nodes.layout.topology.world_size)))]


def from_containers(containers) -> list[Node]:
    return [
        Node(
            c.labels.get("harness.node", c.name),
            [int(r) for r in c.labels.get("harness.ranks", "").split(",") if r],
            c,
        )
        for c in containers
    ]


def _by_rank(output: Path, pattern: str) -> dict[int, dict]:
    """rank -> the JSON a rank wrote as output/stacks/<pattern> (unreadable ones skipped)."""
    out = {}
    for path in sorted((output / "stacks").glob(pattern)):
        try:
            info = json.loads(path.read_text())
            out[int(info["rank"])] = info
        except (OSError, ValueError, KeyError):
            continue
    return out


def registered(output: Path) -> dict[int, dict]:
    """rank -> what its process wrote down (pid, file, start_ticks, main_thread)."""
    return _by_rank(output, "rank*.pid.json")


def failed(output: Path) -> dict[int, dict]:
    """rank -> its flight recorder when it failed ({"time", "collectives"}: stack_dump's
    at_failure), for the ranks that wrote one."""
    return _by_rank(output, "rank*.failed.json")


def dump(output: Path, places: list[Node], why: str, world: int | None = None) -> dict:
    """Signal every live registered rank, wait, parse. Returns {"time", "started_at" (unix),
    "why", "dump_s",
    "summaries": [one line per rank], "ranks": {rank: {"state", "summary", "threads",
    "collectives", "text", "main_thread", "throttled"}}}; the raw dumps stay in
    <output>/stacks/."""
    t0 = time.time()
    info = registered(output)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    states, offsets, throttled = {}, {}, set()
    for node in places:
        state, code = node.state()
        mine = [r for r in node.ranks if r in info]
        for r in node.ranks:
            states[r] = {
                "paused": "paused (its container is frozen: it cannot dump)",
                "exited": f"exited ({code})",
            }.get(state) or "not registered"
        if state != "running" or not mine:
            continue
        script = ""
        for r in mine:
            offsets[r] = _size(output / "stacks" / f"rank{r}.txt")
            header = f"=== stacks of rank {r} at {stamp} ({why}) ==="
            script += _SIGNAL.format(
                pid=int(info[r]["pid"]),
                file=shlex.quote(info[r]["file"]),
                rank=r,
                ticks=info[r].get("start_ticks"),
                header=shlex.quote(header),
                looks=STOP_LOOKS,
            )
        for line in node.sh(script).splitlines():  # "<rank> <what> [times seen stopped]"
            r, _, what = line.partition(" ")
            if not (r.isdigit() and int(r) in states):
                continue
            word, _, seen = what.partition(" ")
            states[int(r)] = {
                "stopped": "stopped (SIGSTOP: it cannot dump)",
                "exited": "exited",
            }.get(word, word)
            if word == "signalled" and seen not in ("", "0"):
                throttled.add(int(r))
    for r in range(world or 0):
        states.setdefault(r, "not started (no container or process holds it)")
    signalled = [r for r, s in states.items() if s == "signalled"]
    texts = _settle(output, {r: offsets[r] for r in signalled})
    ranks, lines = {}, []
    for r in sorted(states):
        if r in texts:
            parsed = stack_text.parse(texts[r])
            line = stack_text.summary(r, parsed, info[r].get("main_thread"))
            if r in throttled:
                line += "; seen stopped, then running again: it is stopped and continued"
            ranks[r] = {
                "state": "dumped",
                "summary": line,
                **parsed,
                "text": texts[r],
                "main_thread": info[r].get("main_thread"),
                "throttled": r in throttled,
            }
        else:
            line = f"rank {r}: {states[r]}"
            ranks[r] = {"state": states[r], "summary": line}
        lines.append(line)
    return {
        "time": stamp,
        "started_at": round(t0, 3),
        "why": why,
        "dump_s": round(time.time() - t0, 2),
        "summaries": lines,
        "ranks": ranks,
    }


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _settle(output: Path, offsets: dict[int, int]) -> dict[int, str]:
    """Each signalled rank's new text, once it ends with the end line, or has stopped growing
    for QUIET_S, or SETTLE_S has passed."""
    texts, grew = {}, {r: time.monotonic() for r in offsets}
    deadline = time.monotonic() + SETTLE_S
    pending = dict(offsets)
    while pending and time.monotonic() < deadline:
        time.sleep(0.2)
        for r, start in list(pending.items()):
            text = _read(output / "stacks" / f"rank{r}.txt", start)
            if text != texts.get(r):
                texts[r], grew[r] = text, time.monotonic()
            quiet = (
                time.monotonic() - grew[r] > QUIET_S
                and "most recent call first" in text
                and stack_dump.FR_BEGIN not in text
            )  # then its end line is on its way
            if stack_text.END in text or quiet:
                del pending[r]
    return texts


def _read(path: Path, start: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def markdown(taken: dict) -> list[str]:
    """fault.md's section: the one-line summaries, then each dumped rank's threads."""
    lines = ["", f"## Stacks ({taken['why']}, {taken['time']}, dumped in {taken['dump_s']} s)", ""]
    lines += [f"- {x}" for x in taken["summaries"]]
    for r, x in sorted(taken["ranks"].items()):
        if x.get("text"):
            lines += ["", f"### rank {r}", "", "```", x["text"].rstrip(), "```"]
    return lines


def take(nodes, why: str, say: bool = True) -> dict | None:
    """dump() for a run the harness is driving (lifecycle's backend); never raises: a run's
    end must not fail over a diagnostic (None, and why on stderr, where it could not). `say`
    False: the summaries are kept, not printed (the stall watch's looks after its first)."""
    try:
        world = nodes.layout.topology.world_size  # ranks with no node yet (no-show) are said too
        taken = dump(nodes.run_dir / "output", nodes_of(nodes), why, world)
    except Exception as e:
        print(f"harness: could not dump the ranks' stacks: {e}", file=sys.stderr)
        return None
    if say:
        said(taken, nodes.run_dir / "output/stacks")
    return taken


def said(taken: dict, stacks_dir) -> None:
    """A dump's lines on the terminal: where every thread is kept, each rank's summary."""
    print(f"harness: stacks ({taken['why']}); every thread's in {stacks_dir}:")
    for line in taken["summaries"]:
        print(f"  {line}")
