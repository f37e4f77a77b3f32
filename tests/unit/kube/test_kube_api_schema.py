"""What has no CRD in ../shared/kube, checked against the Kubernetes API's own schemas: the
ConfigMaps, option 2's batch Job, and every pod the three kinds render (wrapped in a core
v1 PodTemplate: the PyTorchJob's replicas, the TrainingRuntime's node), with the claims
mounted. The schemas are the API server's OpenAPI as JSON Schema, one per release, shipped
offline by `kubernetes-validate` (strict: a field the API does not know is an error).

Not in a schema: the API server's own validation code (kubernetes pkg/apis/core/validation).
Its rules that these pods meet are checked by hand here: names DNS labels and unique, every
mount naming a volume of the pod, a subPath relative without '..', one mount per path."""

from __future__ import annotations

import re

import pytest
import yaml

from support.kube_objects import EXTRAS, FULL
from support.paths import ROOT
from tuning.harness.backends import kube_pod, kube_trainjob
from tuning.harness.commands import kube

kv = pytest.importorskip("kubernetes_validate")

VERSIONS = ("1.29.0", kv.latest_version() + ".0")  # the Training Operator 1.9's oldest; newest
CPU = (ROOT / "configs/accelerate/fsdp-cpu.yaml").read_text()
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
SHAPES = [
    ("pytorchjob", 4, 2, 1),
    ("pytorchjob", 0, 1, 2),
    ("trainjob", 0, 2, 1),
    ("trainjob", 8, 1, 1),
    ("job", 4, 1, 1),
    ("job", 0, 1, 3),
]


def objects(kind, gpus, nodes, nproc, extra=None, restarts=1) -> list[dict]:
    layout = kube.job_layout(
        gpus, nproc, nodes, kind=kind, name="aj", run_id="r1", run_dir="/tmp/r1", **(extra or {})
    )
    job = {"max_steps": 3, "output_dir": "/output"}
    objs = kube.render(layout, job, CPU, restarts)
    return [kube_pod.plain(o) for o in objs]


def pod_templates(doc: dict) -> list[dict]:
    """Every pod template of an object, as a core v1 PodTemplate."""
    if doc["kind"] == "Job":
        templates = [doc["spec"]["template"]]
    elif doc["kind"] == "PyTorchJob":
        templates = [r["template"] for r in doc["spec"]["pytorchReplicaSpecs"].values()]
    elif doc["kind"] == "TrainingRuntime":
        templates = [
            r["template"]["spec"]["template"]
            for r in doc["spec"]["template"]["spec"]["replicatedJobs"]
        ]
    else:
        templates = []
    return [
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": t}
        for t in templates
    ]


def api_rule_failures(pod: dict) -> list[str]:
    """The API server's validation rules (not in the schema) these pods meet, by hand."""
    failed = []
    volumes = [v["name"] for v in pod["volumes"]]
    names = [c["name"] for c in pod["containers"]]
    for what, found in (("volume", volumes), ("container", names)):
        failed += [f"{what} {n!r} is not a DNS label" for n in found if not DNS_LABEL.fullmatch(n)]
        if len(set(found)) != len(found):
            failed.append(f"{what} names repeat: {found}")
    for ctr in pod["containers"]:
        paths = [m["mountPath"] for m in ctr["volumeMounts"]]
        if len(set(paths)) != len(paths):
            failed.append(f"{ctr['name']}: two mounts at one path: {paths}")
        for m in ctr["volumeMounts"]:
            if m["name"] not in volumes:
                failed.append(f"{ctr['name']}: mount {m['mountPath']} names no volume")
            sub = m.get("subPath", "")
            if sub.startswith("/") or ".." in sub.split("/"):
                failed.append(f"{ctr['name']}: subPath {sub!r}")
    return failed


def invalid(doc: dict, version: str) -> str | None:
    try:
        kv.validate(doc, version, strict=True)
    except kv.ValidationError as e:
        return f"{doc['kind']} {'.'.join(map(str, e.path))}: {e.message}"
    return None


@pytest.mark.parametrize("extra", EXTRAS)
@pytest.mark.parametrize(("kind", "gpus", "nodes", "nproc"), SHAPES)
def test_core_objects_and_pods_validate_against_the_kubernetes_api(kind, gpus, nodes, nproc, extra):
    docs = objects(kind, gpus, nodes, nproc, EXTRAS[extra])
    core = [d for d in docs if d["kind"] in ("ConfigMap", "Job")]
    maps = {"plain": 1, "claims+entry": 2, "src+args": 3, "uid-auto": 1}[
        extra
    ]  # job; launcher; SRC
    assert len(core) == maps + (kind == "job")
    templates = [t for d in docs for t in pod_templates(d)]
    assert templates
    for version in VERSIONS:
        for doc in core + templates:
            assert invalid(doc, version) is None
    for t in templates:
        assert api_rule_failures(t["template"]["spec"]) == []


def test_the_claims_are_in_every_pod_and_checked():
    for kind, gpus, nodes, nproc in SHAPES:
        for t in (t for d in objects(kind, gpus, nodes, nproc, FULL) for t in pod_templates(d)):
            spec = t["template"]["spec"]
            claims = {v["name"]: v.get("persistentVolumeClaim") for v in spec["volumes"]}
            assert claims["output"] == {"claimName": "out"}
            assert claims["model"] == {"claimName": "models", "readOnly": True}
            assert spec["securityContext"]["fsGroup"] == 1000


def test_the_checks_can_fail():
    job = next(d for d in objects("job", 0, 1, 2, FULL) if d["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    pod["containers"][0]["volumeMounts"][0]["readOnly"] = "yes"
    assert invalid(job, VERSIONS[0]) == (
        "Job spec.template.spec.containers.0.volumeMounts.0.readOnly: 'yes' is not of type "
        "'boolean', 'null'"
    )
    pod["containers"][0]["volumeMounts"][0]["readOnly"] = True
    pod["containers"][1]["volumeMount"] = []  # a misspelt field: strict refuses it
    assert "('volumeMount' was unexpected)" in invalid(job, VERSIONS[1])
    del pod["containers"][1]["volumeMount"]
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] != "model"]
    pod["containers"][1]["name"] = "rank0"
    assert api_rule_failures(pod) == [
        "container names repeat: ['rank0', 'rank0']",
        "rank0: mount /model names no volume",
        "rank0: mount /model names no volume",
    ]


def test_the_docs_claim_example_is_a_valid_claim():
    section = (ROOT / "docs/kubernetes.md").read_text()
    block = re.search(
        r"```yaml\n(apiVersion: v1\nkind: PersistentVolumeClaim\n.*?)```", section, re.S
    )
    assert block, "docs/kubernetes.md shows a PersistentVolumeClaim"
    claim = yaml.safe_load(block.group(1))
    for version in VERSIONS:
        assert invalid(claim, version) is None
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_trainjob_objects_render_through_the_same_pod():
    # the TrainJob's runtime holds the same pod as the PyTorchJob (kube_pod), claims and all
    layout = kube.job_layout(
        0, 1, 2, kind="trainjob", name="aj", run_id="r1", run_dir="/tmp/r1", **FULL
    )
    runtime = kube_pod.plain(kube_trainjob.render(layout, {}, CPU)[-2])
    (t,) = pod_templates(runtime)
    mounts = {m["mountPath"]: m for m in t["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["/model"] == {
        "mountPath": "/model",
        "name": "model",
        "readOnly": True,
        "subPath": "granite",
    }
    assert mounts["/data/train.jsonl"]["subPath"] == "sets/train.jsonl"
    assert mounts["/opt/harness-launch"] == {
        "mountPath": "/opt/harness-launch",
        "name": "launch",
        "readOnly": True,
    }
