"""`make repro` on the cluster-log corpus (tests/cluster_logs/: failures users posted publicly,
rebuilt as a cluster leaves them; its README says how a case is written), scored by
benchmarks/repro_corpus.py: every case whose report shows the culprit is named right with its
world size, no case names a rank its report does not allow, every variant (pods.yaml, timestamps,
[rankN]: prefixes, the pods' order, each operator's pod names) gives its case's verdict.
A case added to the folder is scored by these tests as it is."""

from __future__ import annotations

import sys
from urllib.parse import urlparse

import pytest

from support.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import repro_corpus  # noqa: E402

CASES = repro_corpus.cases()
# Cases make repro misses, each with why (strict: a reader that starts naming it right fails
# here, and the entry goes)
MISSED: dict[str, str] = {}


@pytest.fixture(scope="module")
def scored() -> dict[str, dict]:
    return {r["case"]: r for r in repro_corpus.run()}


def test_the_corpus_is_whole():
    assert len(CASES) >= 30, f"{len(CASES)} cases; the corpus holds at least 30"
    for case in CASES:
        meta = case.meta
        assert urlparse(meta.get("source") or "").netloc == "github.com", case.id
        assert meta.get("sure") in ("shown", "likely", "cannot tell"), case.id
        assert isinstance(case.truth.get("world"), int), case.id
        assert (meta["sure"] == "cannot tell") == (not case.culprits), case.id
        assert case.logs(), f"{case.id}: no log"
        for pod in meta.get("nodes") or []:
            assert any(name.startswith(pod + ".") for name in case.logs()) or (
                case.pods() and pod in [p["metadata"]["name"] for p in case.pods()]
            ), f"{case.id}: node {pod} has neither a log nor an object"


def _ids(reason_if_missed: bool = True) -> list:
    """Every case; those MISSED expected to fail, strictly."""
    return [
        pytest.param(c.id, marks=pytest.mark.xfail(strict=True, reason=MISSED[c.id]))
        if c.id in MISSED and reason_if_missed
        else c.id
        for c in CASES
    ]


@pytest.mark.parametrize("case", _ids(False))
def test_no_case_names_a_rank_its_report_does_not_allow(case, scored):
    named = scored[case]["verdict"]["culprits"]
    allowed = {c.id: c.allowed for c in CASES}[case]
    assert set(named) <= allowed, f"{case}: named {named}; its report allows {sorted(allowed)}"


@pytest.mark.parametrize("case", _ids())
def test_each_case_gets_the_verdict_its_report_shows(case, scored):
    r = scored[case]
    if r["truth"]["culprits"]:
        assert r["score"] == "right", f"{case}: {r['score']}: {r['verdict']}"
    else:
        assert r["score"] == "cannot tell, right", f"{case}: {r['verdict']}"


@pytest.mark.parametrize("case", _ids(False))
def test_every_variant_gives_its_cases_verdict(case, scored):
    base = scored[case]["verdict"]
    for name, got in scored[case]["variants"].items():
        assert repro_corpus.keeps(got, base, name), (
            f"{case}, {name}: {got['culprits']} of {got['world']}, not "
            f"{base['culprits']} of {base['world']}"
        )


def test_a_name_that_says_nothing_is_said(tmp_path):
    """The same lines under names that carry no node: placed by their lines, and the one pod
    no line places is said to be the one left."""
    logs = {"a.log": "[rank0]: step\n", "b.log": "loading\n", "c.log": "[rank2]: step\n"}
    for name, text in logs.items():
        (tmp_path / name).write_text(text)
    from tuning.harness.clusterlogs import source

    got = source.load(tmp_path)
    assert {c.name: c.node_rank for c in got.containers} == {"a": 0, "b": 1, "c": 2}
    assert any("b: its name and lines say nothing of its node" in x for x in got.notes)


def test_the_docs_table_and_its_record_are_a_fresh_scoring(scored):
    """docs/repro.md's table and docs/records/repro_corpus.json are what the corpus scores now
    (remake both: benchmarks/repro_corpus.py --docs)."""
    import json

    kept = json.loads((repro_corpus.RECORDS / "repro_corpus.json").read_text())
    rows = [scored[r["case"]] for r in kept]  # a case added since is scored above, not here
    assert kept == repro_corpus.record(rows)
    assert repro_corpus.docs_section(rows) in repro_corpus.DOCS.read_text()
