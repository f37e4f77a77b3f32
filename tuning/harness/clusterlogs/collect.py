"""A harness run folder (make up, fault, a kube rehearsal) as a cluster would leave it for a
user to copy: one log a pod (`kubectl logs <pod>`: the container's whole output) and the pods'
objects (`kubectl get pods -o yaml`: a v1 List of Pods, their status as the kubelet writes it
from the runtime's: state.terminated {exitCode, reason, startedAt, finishedAt}, restartCount).
Each node (a Compose service) is a pod of that name; its training container is `pytorch`,
its environment the node's (ranks/<node>.launch.json). Nothing of the harness's own records
(metrics, summary's verdict) goes in: `make repro` then reads what a user would have."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from tuning.harness.errors import HarnessError


def _reason(rank: dict) -> str:
    """The kubelet's terminated.reason from the runtime's state (kuberuntime: OOMKilled when
    the runtime says so, Completed for exit 0, else Error)."""
    if rank.get("oom_killed"):
        return "OOMKilled"
    return "Completed" if rank.get("exit_code") == 0 else "Error"


def pod(node: str, ranks: list[dict], env: dict, image: str, restarts: int) -> dict:
    """One node as the Pod object `kubectl get pod -o yaml` shows after it ended."""
    first = ranks[0]
    code = first.get("exit_code")
    terminated = {
        "exitCode": code if code is not None else 137,
        "reason": _reason(first),
        "containerID": f"docker://{first.get('container') or node}",
    }
    for key, field in (("startedAt", "started_at"), ("finishedAt", "finished_at")):
        if first.get(field):
            terminated[key] = first[field][:19] + "Z"  # the API's RFC 3339, in seconds
    status = {
        "phase": "Succeeded" if code == 0 else "Failed",
        "containerStatuses": [
            {
                "name": "pytorch",
                "image": image,
                "imageID": image,
                "ready": False,
                "restartCount": restarts,
                "state": {"terminated": terminated},
            }
        ],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": node},
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": image,
                    "env": [{"name": k, "value": str(v)} for k, v in env.items() if v is not None],
                }
            ]
        },
        "status": status,
    }


def kubectl_view(run_dir: Path, out: Path) -> Path:
    """`out` made from `run_dir`: <pod>.log for every node, and pods.yaml."""
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file() or not (run_dir / "logs").is_dir():
        raise HarnessError(
            f"FROM={run_dir}: a harness run folder has summary.json and logs/; "
            "this has not (a cluster's logs: a folder of <pod>.log files)"
        )
    summary = json.loads(summary_path.read_text())
    image = (summary.get("image") or {}).get("tag") or "tuning-harness:latest"
    by_node: dict[str, list[dict]] = {}
    for r in summary.get("ranks") or []:
        by_node.setdefault(r["node"], []).append(r)
    restarts = len(summary.get("restarts") or [])
    out.mkdir(parents=True, exist_ok=True)
    items = []
    for node, ranks in by_node.items():
        log = run_dir / "logs" / f"{node}.log"
        if log.is_file():
            shutil.copy(log, out / f"{node}.log")
        launch = run_dir / "ranks" / f"{node}.launch.json"
        env = json.loads(launch.read_text()).get("env", {}) if launch.is_file() else {}
        items.append(pod(node, ranks, env, image, restarts))
    listed = {"apiVersion": "v1", "kind": "List", "items": items}
    (out / "pods.yaml").write_text(yaml.safe_dump(listed, sort_keys=False))
    return out
