"""Every rendered PyTorchJob, TrainJob and TrainingRuntime against the operators' own CRD
schemas, read from ../shared/kube/ beside the checkout: third-party files, never copied into
this repository (not even a rule's text). jsonschema checks the schemas; the CRDs' CEL rules
that a create meets are evaluated from their own texts by a CEL engine (cel-python)."""

from __future__ import annotations

from functools import cache

import pytest
import yaml

from support.kube_objects import EXTRAS
from support.paths import ROOT
from tuning.harness.backends import kube_pod, kube_trainjob
from tuning.harness.commands import kube

jsonschema = pytest.importorskip("jsonschema")
celpy = pytest.importorskip("celpy")

CRDS = ROOT.parent / "shared" / "kube"
FILES = {
    "PyTorchJob": "kubeflow.org_pytorchjobs.yaml",
    "TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
    "TrainingRuntime": "trainer.kubeflow.org_trainingruntimes.yaml",
}
FSDP = (ROOT / "configs/accelerate/fsdp.yaml").read_text()
CPU = (ROOT / "configs/accelerate/fsdp-cpu.yaml").read_text()
SHAPES = [(4, 2, 1), (0, 1, 2), (0, 2, 1), (8, 1, 1), (0, 3, 2)]  # GPUs/pod, pods, CPU ranks/pod


@cache
def schema(kind: str) -> dict:
    path = CRDS / FILES[kind]
    if not path.is_file():
        pytest.skip(  # red in CI (support/ci_gate.py): CI keeps the CRDs beside the checkout
            f"{path} is missing (the operators' CRDs, kept beside the checkout)"
        )
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
# Evaluated from the CRDs' own texts by a CEL engine (cel-python), as the API server does on a
# create; this repository carries none of them. A transition rule (it reads oldSelf) runs on
# updates only, and a rendered object is only ever created.
CEL = celpy.Environment()


def cel_rules(s: dict, path: tuple = ()):
    """(path, rule) for every CEL rule of the schema; "[]" an item, "{}" a map value."""
    for r in s.get("x-kubernetes-validations", []):
        yield path, r
    for key, sub in s.get("properties", {}).items():
        yield from cel_rules(sub, (*path, key))
    if isinstance(s.get("items"), dict):
        yield from cel_rules(s["items"], (*path, "[]"))
    if isinstance(s.get("additionalProperties"), dict):
        yield from cel_rules(s["additionalProperties"], (*path, "{}"))


def on_update(rule: dict) -> bool:
    return "oldSelf" in rule["rule"]


@cache
def program(rule: str):
    return CEL.program(CEL.compile(rule))


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
    """'path: the rule's own message' for every create rule the document breaks."""
    failed = []
    for path, rule in cel_rules(schema(doc["kind"])):
        if on_update(rule):
            continue
        for value in at(doc, path):
            ok = program(rule["rule"]).evaluate({"self": celpy.json_to_cel(value)})
            if not (isinstance(ok, celpy.celtypes.BoolType) and ok):  # false, or an error
                failed.append(f"{'.'.join(path) or '<root>'}: {rule.get('message', rule['rule'])}")
    return failed


# --- The rendered objects -------------------------------------------------------------------


def rendered(
    kind: str, gpus: int, nodes: int, nproc: int, name: str = "tj", layout_kw=None, **kw
) -> list:
    layout = kube.job_layout(
        gpus,
        nproc,
        nodes,
        kind=kind,
        name=name,
        run_id="r1",
        run_dir="/tmp/r1",
        **(layout_kw or {}),
    )
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
    [
        ("pytorchjob", {}),
        ("pytorchjob", {"max_restarts": 3}),
        ("pytorchjob", {"max_restarts": 2, "restart_policy": "OnFailure"}),
        ("trainjob", {}),
        ("trainjob", {"max_restarts": 2}),
    ],
)
@pytest.mark.parametrize("extra", EXTRAS)
def test_rendered_objects_validate_against_the_crds(kind, restarts, gpus, nodes, nproc, extra):
    docs = rendered(kind, gpus, nodes, nproc, layout_kw=EXTRAS[extra], **restarts)
    assert [d["kind"] for d in docs] == (
        ["PyTorchJob"] if kind == "pytorchjob" else ["TrainingRuntime", "TrainJob"]
    )
    for doc in docs:
        assert errors(doc) == [], doc["kind"]
        assert cel_failures(doc) == [], doc["kind"]


def test_every_create_rule_compiles_and_the_update_only_ones_are_the_transitions():
    found = {kind: list(cel_rules(schema(kind))) for kind in FILES}
    for rules in found.values():  # the engine reads every rule a create meets
        for _, rule in rules:
            if not on_update(rule):
                program(rule["rule"])
    # The transition rules: immutability, checked on update by the API server only.
    assert all(on_update(r) for _, r in found["PyTorchJob"])
    assert any(on_update(r) for _, r in found["TrainJob"])
    assert any(on_update(r) for _, r in found["TrainingRuntime"])
    paths = {".".join(p) for p, r in found["TrainJob"] if on_update(r)}
    assert {"spec.runtimeRef", "spec.trainer", "spec.managedBy"} <= paths


def test_the_checks_can_fail():
    runtime, train_job = rendered("trainjob", 0, 2, 1)
    bad = {
        **train_job,
        "spec": {
            **train_job["spec"],
            "trainer": {**train_job["spec"]["trainer"], "numNodes": "two", "numNode": 2},
        },
    }
    assert sorted(errors(bad)) == [
        "spec.trainer.numNodes: 'two' is not of type 'integer'",
        "spec.trainer: Additional properties are not allowed ('numNode' was unexpected)",
    ]
    named = {**train_job, "metadata": {**train_job["metadata"], "name": "Bad_Name"}}
    (said,) = cel_failures(named)  # the name's rule, in the CRD's own words
    assert said.startswith("<root>: "), said
    two = {**runtime, "spec": {**runtime["spec"], "mlPolicy": {"torch": {}, "mpi": {}}}}
    (said,) = cel_failures(two)  # at most one mlPolicy
    assert said.startswith("spec.mlPolicy: "), said
    (job,) = rendered("pytorchjob", 0, 1, 2)
    job["spec"]["runPolicy"]["backoffLimit"] = "0"
    assert errors(job) == ["spec.runPolicy.backoffLimit: '0' is not of type 'integer'"]


def test_the_stock_runtime_validates_as_a_sanity_check_of_the_validator():
    stock = yaml.safe_load((CRDS / "torch_distributed.yaml").read_text()) if CRDS.is_dir() else None
    if stock is None:
        schema("TrainingRuntime")  # skips, or fails under CI
    stock["kind"] = "TrainingRuntime"  # the same spec schema as the ClusterTrainingRuntime
    assert errors(stock) == [] and cel_failures(stock) == []
