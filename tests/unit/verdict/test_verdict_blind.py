"""The verdict never reads what a fault injected (verdict/__init__.py): no module of it imports
the fault side or names the injection, and a run's facts give the same verdict whether the
culprit's error is the injector's own words or a user's, and whatever a fault record beside
them says was struck."""

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
        said[words] = (v["class"], tuple(v["culprits"]))
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
    assert (v["class"], v["culprits"]) == (base["class"], base["culprits"]) == ("died", [1])
    assert "rank 3" not in json.dumps(v)
