"""The verdict never reads what a fault injected (verdict/__init__.py): no module of it imports
the fault side or names the injection, and a run's facts give the same verdict whether the
culprit's error is the injector's own words or a user's, and whatever a fault record beside
them says was struck. And no module reads the verdict's or a record's keys but the one whose
type writes and reads them."""

from __future__ import annotations

import ast
import copy
import json

import pytest

from support.paths import ROOT
from tuning.harness.verdict import facts, rules

VERDICT = ROOT / "tuning/harness/verdict"
PEER = "RuntimeError: [gloo/transport/tcp/pair.cc:598] Connection closed by peer [172.19.0.3]:3881"


def test_no_module_of_the_verdict_reads_the_fault_side():
    for path in sorted(VERDICT.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [getattr(node, "module", None) or ""] + [a.name for a in node.names]
                assert not any("fault" in n for n in names), (path.name, names)
            docs = {
                id(n.body[0].value)
                for n in ast.walk(tree)
                if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef)
                and n.body
                and isinstance(n.body[0], ast.Expr)
            }
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) not in docs:
                    assert "inject" not in node.value.lower(), (path.name, node.value)


def _run(culprit: int, error: str, world: int = 4) -> tuple[dict, dict]:
    """A crash as a fault run records it: the culprit ends first by its own exception, the
    others 0.4 s later on a peer lost."""
    metrics, exits = {}, {}
    for r in range(world):
        own = r == culprit
        end = {"event": "end", "status": "failed", "error": error if own else PEER}
        metrics[r] = [{"event": "phase", "name": "rendezvous"}, {"event": "step", "step": 9}, end]
        exits[r] = {"code": 1, "t": 12.0 if own else 12.4, "by_itself": True}
        exits[r]["signature"] = None if own else "Connection closed by peer"
    return metrics, exits


@pytest.mark.parametrize("culprit", [0, 2])
def test_the_injectors_words_and_a_users_give_one_verdict(culprit):
    said = {}
    for words in ("RuntimeError: injected crash at step 9", "ValueError: bad batch at step 9"):
        metrics, exits = _run(culprit, words)
        v = rules.judge(facts.gather(4, metrics, None, exits))
        said[words] = (v.kind, tuple(v.culprits))
    assert set(said.values()) == {("died", (culprit,))}, said


def test_a_fault_record_beside_the_facts_changes_nothing():
    """facts.gather takes no fault: a record that says another rank was struck, put where a
    careless reader would look (the facts and the exits), is not read."""
    metrics, exits = _run(1, "ValueError: bad batch at step 9")
    base = rules.judge(facts.gather(4, metrics, None, exits))
    lying = copy.deepcopy(exits)
    for r in lying:
        lying[r]["injected"] = {"kind": "crash", "rank": 3}
    f = facts.gather(4, metrics, None, lying)
    f["fault"] = {"kind": "crash", "rank": 3, "signature": "injected crash"}
    v = rules.judge(f)
    assert (v.kind, v.culprits) == (base.kind, base.culprits) == ("died", [1])
    assert "rank 3" not in json.dumps(v.to_json())


# The keys of the verdict's JSON and of the records' (fault.json, repro.json, report.json's
# goals), by the module whose type is their one writer and reader. Keys other dicts hold too are
# left out, as no name tells them apart: the facts' and the flight recorder's ("seq", "ranks",
# "error", "ended_by", "signature"), the knobs' ("rank", "timeout_s", "at_step", "steps"),
# summary.json's ("status", "verdict", "exit_code", "oom_killed"), report_stats' paired figures
# ("median", "interval", "pairs", "per_round"), and words any dict may use ("kind", "name").
RECORD_KEYS = {
    "verdict/record.py": {
        *("class", "culprits", "evidence", "rule", "waited_s", "fr_trace", "verdict_s"),
        *("early", "read_from", "ran", "said", "agrees", "flagged", "repaired", "alike"),
    },
    "faults/fault_json.py": {
        *("injected_t", "injected_step", "stopped_by", "outcome", "fault_to_end_s"),
        *("hang_detected_s", "ranks_ended_s", "bound_s", "run_status", "steps_reached"),
        *("leftovers", "checkpoints", "on_a_cluster", "timeline", "goal_met", "steps_note"),
        *("args_note", "last_step_t", "end_t", "end_status", "node_exit_code"),
        *("seen_signature", "before_fault"),
    },
    "clusterlogs/repro_json.py": {
        *("could_not_tell", "caveats", "hung", "from_folder", "replay", "no_replay", "unread"),
        *("world_stated", "missing_ranks", "roles_here", "matches"),
    },
    "bench/goal.py": {
        *("target", "more_rounds", "past", "bound", "need", "lag1", "sentence", "spread"),
        *("past_chance", "rounds_needed", "auto_decides"),
    },
}
# Another format's key of the same name, read in the module that makes that format
ALSO = {
    "commands/pool.py": {"class", "culprits", "evidence", "rule", "verdict_s", "outcome"},  # rows
    "verdict/torch_check.py": {"flagged", "repaired", "alike"},  # fr_check.py's output
    "rehearsal/kube_operator.py": {"outcome", "checkpoints", "timeline", "end_status"},  # restarts
    "rehearsal/rehearse.py": {"outcome"},  # restarts.json
    "commands/soak.py": {"leftovers"},  # soak.json
    "soak/write.py": {"leftovers"},
}


def test_no_module_reads_a_records_keys_but_the_one_that_defines_it():
    """Under tuning/harness a verdict's or a record's key read by name (`x["culprits"]`,
    `x.get("outcome")`) is read only in the module of its type (verdict/record.py,
    faults/fault_json.py, clusterlogs/repro_json.py, bench/goal.py): everywhere else the
    fields are attributes. Writing a dict under such a key is no read, and tests may read the
    files on disk by key: that is the format they check."""
    harness = ROOT / "tuning/harness"
    owner = {key: module for module, keys in RECORD_KEYS.items() for key in keys}
    read = []
    for path in sorted(harness.rglob("*.py")):
        module = str(path.relative_to(harness))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                key = node.slice
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "pop", "setdefault")
                and node.args
            ):
                key = node.args[0]
            else:
                continue
            if not (isinstance(key, ast.Constant) and key.value in owner):
                continue
            if module != owner[key.value] and key.value not in ALSO.get(module, ()):
                read.append(f"{module}:{node.lineno}: {key.value!r} ({owner[key.value]}'s)")
    assert read == [], "\n".join(read)
