"""Every rendered PyTorchJob, TrainJob and TrainingRuntime against the operators' own CRD
schemas, read from ../shared/kube/ beside the checkout: third-party files, never copied into
this repository (not even a rule's text). jsonschema does not evaluate the CRDs' CEL rules;
the ones a create meets are checked here by hand, each known by a digest of its text, and a
rule this file does not know fails the test."""

from __future__ import annotations

import hashlib
import os
import re
from functools import cache

import pytest
import yaml
from conftest import ROOT

from tuning.harness.backends import kube_pod, kube_trainjob
from tuning.harness.commands import kube
from tuning.harness.spec.job_paths import Source

jsonschema = pytest.importorskip("jsonschema")

CRDS = ROOT.parent / "shared" / "kube"
FILES = {"PyTorchJob": "kubeflow.org_pytorchjobs.yaml",
         "TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
         "TrainingRuntime": "trainer.kubeflow.org_trainingruntimes.yaml"}  # fmt: skip
FSDP = (ROOT / "configs/accelerate/fsdp.yaml").read_text()
CPU = (ROOT / "configs/accelerate/fsdp-cpu.yaml").read_text()
SHAPES = [(4, 2, 1), (0, 1, 2), (0, 2, 1), (8, 1, 1), (0, 3, 2)]  # GPUs/pod, pods, CPU ranks/pod


@cache
def schema(kind: str) -> dict:
    path = CRDS / FILES[kind]
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing: CI keeps the operators' CRDs beside the checkout")
        pytest.skip(f"{path} is missing (the operators' CRDs, kept beside the checkout)")
    (version,) = yaml.safe_load(path.read_text())["spec"]["versions"]
    return strict(version["schema"]["openAPIV3Schema"])


def strict(s):
    """The schema as the API server applies it under kubectl's default strict field
    validation: a field the schema does not name is an error, not pruned in silence."""
    if isinstance(s, dict):
        s = {k: strict(v) for k, v in s.items()}
        if (
            "properties" in s
            and "additionalProperties" not in s
            and not s.get("x-kubernetes-preserve-unknown-fields")
        ):
            s["additionalProperties"] = False
    elif isinstance(s, list):
        s = [strict(v) for v in s]
    return s


def errors(doc: dict) -> list[str]:
    v = jsonschema.Draft7Validator(schema(doc["kind"]))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(doc)]


# --- The CEL rules --------------------------------------------------------------------------
# Each rule is known here by a digest of its text (whitespace folded), never by the text: the
# CRDs are the operators' files and this repository carries no copy of them. A rule that
# changes upstream changes its digest, and the test names it unknown.
TRANSITION = "f4f4adcfb233"  # the immutability rule on updates (it reads oldSelf)
ONE_MLPOLICY = "25356e262c57"
NAME_IS_DNS_LABEL = "43ba58b4d868"
URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://.+")  # a scheme, then anything
CEL = {  # digest: (what the rule asks, the same check in Python)
    ONE_MLPOLICY: ("at most one mlPolicy",
                   lambda v: sum(k in v for k in ("torch", "mpi", "jax", "xgboost", "flux")) <= 1),
    "db79007bd8f7": ("at least 1", lambda v: v >= 1),
    "94d855f7f547": ("no container named node", lambda v: "node" not in v),
    "1d1e35e4455e": ("no dependsOn under an InOrder startupPolicy", lambda v: not (
        v.get("startupPolicy", {}).get("startupPolicyOrder") == "InOrder"
        and any("dependsOn" in x for x in v.get("replicatedJobs", [])))),
    "e921f63d90d0": ("no namespace in a claim template",
                     lambda v: all(not t.get("metadata", {}).get("namespace")
                                   for t in v["templates"])),
    NAME_IS_DNS_LABEL: ("name a DNS label",
                        lambda v: re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?",
                                               v["metadata"]["name"]) is not None),
    "d7c81dd73daa": ("name of 63 characters at most", lambda v: len(v["metadata"]["name"]) <= 63),
    "8f8719b24ce8": ("empty or a URI with a scheme",
                     lambda v: v == "" or URI.fullmatch(v) is not None),
    "fd68d6fb21f5": ("managed by the trainer or MultiKueue", lambda v: v in (
        "trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue")),
    "322aa08084b0": ("status has lastUpdatedTime", lambda v: "lastUpdatedTime" in v),  # operator's
}  # fmt: skip


def digest(rule: str) -> str:
    return hashlib.sha256(" ".join(rule.split()).encode()).hexdigest()[:12]


def cel_rules(s: dict, path: tuple = ()):
    """(path, digest) for every CEL rule of the schema; "[]" an item, "{}" a map value.
    A transition rule (it reads oldSelf) is evaluated on updates only: TRANSITION."""
    for r in s.get("x-kubernetes-validations", []):
        yield path, TRANSITION if "oldSelf" in r["rule"] else digest(r["rule"])
    for key, sub in s.get("properties", {}).items():
        yield from cel_rules(sub, (*path, key))
    if isinstance(s.get("items"), dict):
        yield from cel_rules(s["items"], (*path, "[]"))
    if isinstance(s.get("additionalProperties"), dict):
        yield from cel_rules(s["additionalProperties"], (*path, "{}"))


def at(value, path: tuple):
    """The values at `path` in a document (none where a field is absent: no rule runs)."""
    if not path:
        yield value
    elif path[0] in ("[]", "{}"):
        for v in value if path[0] == "[]" else value.values():
            yield from at(v, path[1:])
    elif isinstance(value, dict) and path[0] in value:
        yield from at(value[path[0]], path[1:])


def cel_failures(doc: dict) -> list[str]:
    failed = []
    for path, rule in cel_rules(schema(doc["kind"])):
        if rule == TRANSITION:  # a rendered object is created, never updated
            continue
        what, check = CEL[rule]
        for value in at(doc, path):
            if not check(value):
                failed.append(f"{'.'.join(path) or '<root>'}: {what}")
    return failed


# --- The rendered objects -------------------------------------------------------------------


# MODEL and DATA on claims, OUTPUT_CLAIM, and a foreign trainer (its launcher's ConfigMap)
CLAIMS = kube.claim_mounts(Source("MODEL", "claim", "granite", "MODEL", claim="models"),
                           Source("DATA", "claim", "sets/train.jsonl", "DATA", claim="data"),
                           "out")  # fmt: skip
FULL = {"claims": CLAIMS, "entry": "tuning.sft_trainer", "image": "registry.example/fms:1"}


def rendered(kind: str, gpus: int, nodes: int, nproc: int, name: str = "tj", layout_kw=None,
             **kw) -> list:  # fmt: skip
    layout = kube.job_layout(gpus, nproc, nodes, kind=kind, name=name, run_id="r1",
                             run_dir="/tmp/r1", **(layout_kw or {}))  # fmt: skip
    job, acc = {"max_steps": 3, "output_dir": "/output"}, FSDP if gpus else CPU
    if kind == "trainjob":
        objects = kube_trainjob.render(layout, job, acc, **kw)
    else:
        objects = kube.render(layout, job, acc, **kw)
    # the ConfigMaps are core, no CRD (test_kube_api_schema.py)
    return [kube_pod.plain(o) for o in objects if o.kind != "ConfigMap"]


@pytest.mark.parametrize(("gpus", "nodes", "nproc"), SHAPES)
@pytest.mark.parametrize(
    ("kind", "restarts"),
    [("pytorchjob", {}), ("pytorchjob", {"max_restarts": 3}),
     ("pytorchjob", {"max_restarts": 2, "restart_policy": "OnFailure"}),
     ("trainjob", {}), ("trainjob", {"max_restarts": 2})],
)  # fmt: skip
@pytest.mark.parametrize("extra", [None, FULL], ids=["plain", "claims+entry"])
def test_rendered_objects_validate_against_the_crds(kind, restarts, gpus, nodes, nproc, extra):
    docs = rendered(kind, gpus, nodes, nproc, layout_kw=extra, **restarts)
    assert [d["kind"] for d in docs] == (
        ["PyTorchJob"] if kind == "pytorchjob" else ["TrainingRuntime", "TrainJob"]
    )
    for doc in docs:
        assert errors(doc) == [], doc["kind"]
        assert cel_failures(doc) == [], doc["kind"]


def test_every_cel_rule_is_known_and_the_update_only_ones_listed():
    found = {kind: sorted({rule for _, rule in cel_rules(schema(kind))}) for kind in FILES}
    create = {r for rules in found.values() for r in rules if r != TRANSITION}
    assert create <= set(CEL), f"CEL rules this test does not check: {create - set(CEL)}"
    # The transition rules: immutability, checked on update by the API server only.
    assert found["PyTorchJob"] == [TRANSITION]
    assert TRANSITION in found["TrainJob"] and TRANSITION in found["TrainingRuntime"]
    paths = {".".join(p) for p, r in cel_rules(schema("TrainJob")) if r == TRANSITION}
    assert {"spec.runtimeRef", "spec.trainer", "spec.managedBy"} <= paths


def test_the_checks_can_fail():
    runtime, train_job = rendered("trainjob", 0, 2, 1)
    bad = {**train_job, "spec": {**train_job["spec"], "trainer": {
        **train_job["spec"]["trainer"], "numNodes": "two", "numNode": 2}}}  # fmt: skip
    assert sorted(errors(bad)) == [
        "spec.trainer.numNodes: 'two' is not of type 'integer'",
        "spec.trainer: Additional properties are not allowed ('numNode' was unexpected)",
    ]
    named = {**train_job, "metadata": {**train_job["metadata"], "name": "Bad_Name"}}
    assert cel_failures(named) == [f"<root>: {CEL[NAME_IS_DNS_LABEL][0]}"]
    two = {**runtime, "spec": {**runtime["spec"], "mlPolicy": {"torch": {}, "mpi": {}}}}
    assert cel_failures(two) == [f"spec.mlPolicy: {CEL[ONE_MLPOLICY][0]}"]
    (job,) = rendered("pytorchjob", 0, 1, 2)
    job["spec"]["runPolicy"]["backoffLimit"] = "0"
    assert errors(job) == ["spec.runPolicy.backoffLimit: '0' is not of type 'integer'"]


def test_the_stock_runtime_validates_as_a_sanity_check_of_the_validator():
    stock = yaml.safe_load((CRDS / "torch_distributed.yaml").read_text()) if CRDS.is_dir() else None
    if stock is None:
        schema("TrainingRuntime")  # skips, or fails under CI
    stock["kind"] = "TrainingRuntime"  # the same spec schema as the ClusterTrainingRuntime
    assert errors(stock) == [] and cel_failures(stock) == []
