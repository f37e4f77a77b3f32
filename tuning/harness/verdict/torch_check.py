"""What torch itself says about a desync, for the verdict (rules.py):

- TORCH_DISTRIBUTED_DEBUG=DETAIL wraps every process group in a check that compares each
  collective's fingerprint (sequence number, op, shapes, dtypes) across ranks before it runs,
  and raises on every rank: "Detected mismatch between collectives on ranks. Rank 0 is running
  collective: CollectiveFingerPrint(SequenceNumber=3, OpType=ALLREDUCE, TensorShape=[4], ...),
  but Rank 3 is running collective: CollectiveFingerPrint(...)". Read from the ranks' end
  lines; each rank names one peer, and the odd rank is named by all the others (which rank is
  the odd one out is counted here, by hand).
- The flight recorder's analysis (fr_trace's library), run in a rank's container over every
  rank's dump (tuning/container/rank/fr_check.py): the first collective not called alike, which is
  attached to the verdict with whether it agrees. Its "culprit" is every rank unlike the one it read
  first, so it is reported, not used to name anyone.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from dataclasses import replace

from tuning.harness.errors import ROOT
from tuning.harness.verdict.record import FrTrace, Verdict
from tuning.harness.verdict.words import ranks_text

_DETAIL = re.compile(
    r"Detected mismatch between collectives on ranks\. Rank (\d+) is running "
    r"collective: (.*?), but Rank (\d+) is running collective: (.*)"
)
_OP = re.compile(r"OpType=(\w+)")
_SHAPE = re.compile(r"TensorShape=\[([^\]]*)\]")
_SEQ = re.compile(r"SequenceNumber=(\d+)")
FR_TIMEOUT_S = 90  # fr_check imports torch: seconds on a busy machine


def _print(fingerprint: str) -> str:
    op = _OP.search(fingerprint)
    shape = _SHAPE.search(fingerprint)
    return (op.group(1) if op else "?") + (f" [{shape.group(1)}]" if shape else "")


def detail_mismatch(ranks: dict) -> Verdict | None:
    """The verdict from DETAIL's messages in the ranks' errors, or None when there are none."""
    said = {}
    for r, x in ranks.items():
        m = _DETAIL.search(x.get("error") or "")
        if m and int(m.group(1)) == r:
            said[r] = (int(m.group(3)), _print(m.group(2)), _print(m.group(4)), m.group(2))
    if not said:
        return None
    named: dict[int, int] = {}
    for other, *_ in said.values():
        named[other] = named.get(other, 0) + 1
    top = max(named.values())
    odd = sorted(r for r, n in named.items() if n == top)
    if top == 1 and len(said) <= 2:  # each names the other: no odd one out
        odd = sorted({*said, *named})
        pairs = "; ".join(
            f"rank {r} ran {mine}, rank {o} {theirs}"
            for r, (o, mine, theirs, _) in sorted(said.items())
        )
        return Verdict(
            "desync",
            odd,
            f"torch's TORCH_DISTRIBUTED_DEBUG=DETAIL check stopped "
            f"the ranks: {pairs}; with no majority there is no odd one out, so both "
            "are named",
            "torch",
        )
    accusers = sorted(r for r, (o, *_) in said.items() if o in odd)
    _, mine, theirs, fp = said[accusers[0]]
    seq = _SEQ.search(fp)
    at = f" (their collective #{seq.group(1)})" if seq else ""
    return Verdict(
        "desync",
        odd,
        f"torch's TORCH_DISTRIBUTED_DEBUG=DETAIL check stopped the "
        f"ranks: {ranks_text(odd)} ran {theirs} where {ranks_text(accusers)} ran "
        f"{mine}{at}",
        "torch",
    )


def run_fr_check(places, output, since: float) -> dict | None:
    """tuning/container/rank/fr_check.py over the dumps written since `since`, in the first running
    node (its image's torch), or with this project's Python for LAYOUT=host. None where no node
    runs."""
    for node in places:
        if node.state()[0] != "running":
            continue
        if node.ctr is None:
            cmd = [
                sys.executable,
                str(ROOT / "tuning/container/rank/fr_check.py"),
                str(output / "stacks/fr"),
                str(since),
            ]
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=FR_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                return {"ok": False, "error": f"fr_check ran over {FR_TIMEOUT_S} s"}
            text = out.stdout
        else:
            since_arg = shlex.quote(str(since))
            script = (
                "f=/opt/harness-launch/fr_check.py; [ -f $f ] || "
                "f=/opt/harness/tuning/container/rank/fr_check.py; timeout "
                f"{FR_TIMEOUT_S} python3 $f /output/stacks/fr {since_arg}"
            )
            text = node.sh(script)
        line = next((x for x in reversed(text.splitlines()) if x.startswith("{")), None)
        try:
            return json.loads(line) if line else {"ok": False, "error": text.strip()[-300:]}
        except ValueError:
            return {"ok": False, "error": line[-300:]}
    return None


def attach(found: Verdict, fr: dict | None) -> Verdict:
    """The verdict with torch's flight recorder analysis beside it (`fr`: fr_check.py's
    output): its first flagged collective, the ranks it calls culprits, and whether it points
    at the same collective."""
    if not fr:
        return found
    if not fr.get("ok"):
        return replace(found, fr_trace=FrTrace(False, error=fr.get("error")))
    first = (fr.get("flagged") or [None])[0]
    agrees = None
    if first:
        differs = ", ".join(f"rank {r}: {d['op']} {d['in']}" for r, d in first["differs"].items())
        missing = f"; missing ranks {first['missing']}" if first["missing"] else ""
        said = (
            f"torch's fr_trace flags {first['op']} {first['in']} #{first['seq']}"
            f"{': ' + differs if differs else ''}{missing}"
        )
        if found.seq is not None:
            agrees = first["seq"] == found.seq
    else:
        said = "torch's fr_trace found every recorded collective called alike"
    trace = FrTrace(
        True,
        ranks=fr.get("ranks"),
        repaired=fr.get("repaired"),
        flagged=first,
        alike=fr.get("alike", 0),
        said=said,
        agrees=agrees,
    )
    return replace(found, fr_trace=trace)
