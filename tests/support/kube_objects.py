"""What the kube tests share about rendered objects: the Pod Security Standard "restricted"
checked on a pod spec, and the extras a job is rendered with (claims, a foreign entry, SRC and
ARGS)."""

from __future__ import annotations

from support.paths import USER_SCRIPTS
from tuning.harness.commands import kube
from tuning.harness.layout.job_paths import Source

# The Pod Security Standard "restricted" (kubernetes.io/docs/concepts/security/pod-security-
# standards), rule by rule, on the YAML kubectl would send.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def check_restricted(pod: dict) -> None:
    """The rules of "restricted" on a pod spec as kubectl sends it; TrainJob's runtime too."""
    psc = pod.get("securityContext", {})
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert {next(iter(set(v) - {"name"})) for v in pod["volumes"]} <= RESTRICTED_VOLUMES
    assert pod["automountServiceAccountToken"] is False
    for ctr in pod["containers"]:
        sc = ctr["securityContext"]
        seccomp = sc.get("seccompProfile") or psc.get("seccompProfile")
        assert seccomp["type"] in ("RuntimeDefault", "Localhost")
        assert sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True
        # k8s.io/pod-security-admission policy/check_runAsUser.go (1.23+): "Allowed Values:
        # non-zero values, undefined/null" (KUBE_UID=auto leaves it to the platform)
        assert sc.get("runAsUser", psc.get("runAsUser")) != 0
        assert sc["allowPrivilegeEscalation"] is False and not sc.get("privileged")
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
        assert not any(p.get("hostPort") for p in ctr.get("ports", []))
        # beyond "restricted": a read-only root with each path the trainer writes mounted
        assert sc["readOnlyRootFilesystem"] is True
        mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
        assert {"/output", "/dev/shm", "/tmp"} <= set(mounts) and mounts["/job"]["readOnly"]
        assert {"name": "HOME", "value": "/tmp"} in ctr["env"]


# MODEL and DATA on claims, OUTPUT_CLAIM, and a foreign trainer (its launcher's ConfigMap)
CLAIMS = kube.claim_mounts(
    Source("MODEL", "claim", "granite", "MODEL", claim="models"),
    Source("DATA", "claim", "sets/train.jsonl", "DATA", claim="data"),
    "out",
)
FULL = {"claims": CLAIMS, "entry": "tuning.sft_trainer", "image": "registry.example/fms:1"}
# a script of the user's with its command line, its folder in a ConfigMap (SRC), and the
# rendezvous timeout and grace period rendered
SRC_ARGS = {
    "entry": "/src/train_sft.py",
    "src": str(USER_SCRIPTS),
    "args": ("--output_dir", "/output", "--learning_rate", "1e-4"),
    "rdzv_timeout": 77,
    "grace_s": 45,
}
# KUBE_UID=auto with claims: no runAsUser, no fsGroup (OpenShift assigns both)
UID_AUTO = {"claims": CLAIMS, "uid_auto": True, "user": "1000770000:0"}
EXTRAS = {"plain": None, "claims+entry": FULL, "src+args": SRC_ARGS, "uid-auto": UID_AUTO}
