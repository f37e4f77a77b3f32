"""A manifest: the rendered objects as one YAML stream for `kubectl apply -f`, and back, each
object through its own API's models (the `kubernetes` client's for core and batch kinds, the
Training SDK's for a PyTorchJob, the Trainer API's for a TrainJob and its runtime)."""

from __future__ import annotations

import yaml

from tuning.harness.backends import kube_pod
from tuning.harness.errors import HarnessError

# kind -> (module that holds the model, the model's name)
MODELS = {
    "ConfigMap": ("kubernetes", "V1ConfigMap"),
    "Job": ("kubernetes", "V1Job"),
    "PyTorchJob": ("kubeflow", "KubeflowOrgV1PyTorchJob"),
    "TrainingRuntime": ("trainer", "TrainerV1alpha1TrainingRuntime"),
    "TrainJob": ("trainer", "TrainerV1alpha1TrainJob"),
}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the ConfigMap's files) as literal blocks, readable in the YAML."""


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(*objects) -> str:
    """The objects as one YAML stream, as kubectl would send them (kube_pod.plain)."""
    docs = [kube_pod.plain(obj) for obj in objects]
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def trainer_api():
    try:
        from kubeflow_trainer_api import models
    except ImportError as e:
        raise HarnessError(
            f"the Kubeflow Trainer API models are missing ({e}); install the kube extra: "
            "`.venv/bin/pip install -e '.[kube]'` (kubeflow-trainer-api 2.3)"
        ) from None
    return models


def _model(doc: dict):
    kind = doc.get("kind")
    if kind not in MODELS:
        raise HarnessError(f"a manifest object of kind {kind!r}; known: {', '.join(MODELS)}")
    where, name = MODELS[kind]
    if where == "trainer":
        return getattr(trainer_api(), name).from_dict(doc)
    from kubeflow.training.utils.utils import FakeResponse  # turns a dict into a response

    if where == "kubeflow":
        import kubeflow.training as kf

        return kf.ApiClient().deserialize(FakeResponse(doc), name)
    return kube_pod.k8s().ApiClient().deserialize(FakeResponse(doc), name)


def load(text: str) -> list:
    """Every object of a manifest, in its order, as its API's model."""
    return [_model(d) for d in yaml.safe_load_all(text) if d]


def job_config_map(objects) -> object:
    """The ConfigMap with the job's files (the first; ENTRY adds the launcher's)."""
    return next(o for o in objects if o.kind == "ConfigMap")


def of_kind(objects, kind: str):
    found = [o for o in objects if o.kind == kind]
    if len(found) != 1:
        raise HarnessError(f"the manifest holds {len(found)} {kind} object(s), not one")
    return found[0]


def volume_items(objects, volume: str) -> dict[str, str]:
    """key -> path of the ConfigMap volume named `volume` in the pods the objects make (the
    first pod template that has it: every kind renders one pod spec)."""

    def find(node):
        if isinstance(node, dict):
            for v in node.get("volumes") or ():
                if isinstance(v, dict) and v.get("name") == volume and "configMap" in v:
                    return {i["key"]: i["path"] for i in v["configMap"].get("items") or ()}
            return next((f for f in map(find, node.values()) if f is not None), None)
        if isinstance(node, list):
            return next((f for f in map(find, node) if f is not None), None)
        return None

    found = next((f for f in (find(kube_pod.plain(o)) for o in objects) if f is not None), None)
    if found is None:
        raise HarnessError(f"no pod of the manifest has a ConfigMap volume named {volume!r}")
    return found
