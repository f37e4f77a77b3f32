"""What each Kubeflow operator does when a training pod's container exits non-zero: its
restart rules, as functions of the rendered object, so the rehearsal and the docs say the
same thing.

Training Operator V1 (PyTorchJob; kubeflow/trainer release-1.9,
pkg/controller.v1/common/pod.go and pkg/util/train/train_util.go `IsRetryableExitCode`):
- restartPolicy Never: the pod stays failed; the job fails.
- OnFailure: the kubelet restarts the container in place, the pod alone (its emptyDirs kept).
- ExitCode: the operator deletes the pod and makes it again (alone, same name, new emptyDirs)
  when the exit code of its `pytorch` container is retryable, 128 and above (a signal: 137
  SIGKILL, 143 SIGTERM); 1 to 127 are permanent and fail the job.
- runPolicy.backoffLimit bounds the restarts of all the job's pods together; past it the
  job fails and cleanPodPolicy removes the pods still running.

Trainer v2 (TrainJob on JobSet; kubernetes-sigs/jobset `failurePolicy`): the Job of a failed
pod fails (backoffLimit 0 in our runtime), and JobSet recreates every Job of the set, so
every pod, up to failurePolicy.maxRestarts times; then the JobSet, and the TrainJob, fail.

A batch Job (kubernetes pkg/controller/job; KIND=job, one pod of a container per rank): the
pod's restartPolicy is Never, so it fails once every container has ended and one failed; the
Job controller then makes a new pod (every container, new emptyDirs), up to backoffLimit
times, after a back-off of 10 s doubling (not waited in the rehearsal); then the Job fails and
its pods still running are deleted.

Every action but OnFailure's makes new pods, and a new pod has new emptyDirs: what was in an
emptyDir /output (checkpoints) is gone; a claim is the same claim (`RENEWS`).
"""

from __future__ import annotations

from tuning.harness.errors import HarnessError

V1_POLICIES = ("Never", "OnFailure", "ExitCode")
RESTART_IN_PLACE = "restart the container in place"
RESTART_POD = "recreate the pod alone"
RESTART_ALL = "recreate every pod"
FAIL = "fail the job"
RESTARTS = (RESTART_IN_PLACE, RESTART_POD, RESTART_ALL)  # each counts against the bound
RENEWS = (RESTART_POD, RESTART_ALL)  # new pods: new emptyDirs


def v1_policy(policy: str | None, max_restarts: int) -> str:
    """RESTART_POLICY for a PyTorchJob: given, or Never without restarts and ExitCode with
    them (a killed or OOM-killed rank is retried, a bug in the trainer is not)."""
    if policy is None:
        return "ExitCode" if max_restarts else "Never"
    if policy not in V1_POLICIES:
        raise HarnessError(f"RESTART_POLICY={policy!r}: one of {', '.join(V1_POLICIES)}")
    return policy


def retryable(exit_code: int) -> bool:
    """V1's ExitCode rule: 128 and above are signals (retried); 1 to 127 are the program's."""
    return exit_code >= 128


def v1_action(policy: str, exit_code: int, restarts: int, backoff_limit: int) -> str:
    """What the Training Operator does when a pod exits with `exit_code`, after `restarts`
    restarts of the job's pods so far."""
    if exit_code == 0:
        raise ValueError("a pod that exits 0 succeeded; nothing restarts it")
    if policy == "Never" or restarts >= backoff_limit:
        return FAIL
    if policy == "ExitCode" and not retryable(exit_code):
        return FAIL
    return RESTART_IN_PLACE if policy == "OnFailure" else RESTART_POD


def v2_action(exit_code: int, restarts: int, max_restarts: int) -> str:
    """What JobSet does for a TrainJob when a pod exits with `exit_code` (any non-zero code:
    our runtime sets no failurePolicy rules), after `restarts` restarts of the set."""
    if exit_code == 0:
        raise ValueError("a pod that exits 0 succeeded; nothing restarts it")
    return RESTART_ALL if restarts < max_restarts else FAIL


def job_action(exit_code: int, restarts: int, backoff_limit: int) -> str:
    """What the Job controller does when the pod of a batch Job fails with `exit_code` (any
    container's non-zero code: no podFailurePolicy), after `restarts` new pods so far."""
    if exit_code == 0:
        raise ValueError("a pod that exits 0 succeeded; nothing restarts it")
    return RESTART_ALL if restarts < backoff_limit else FAIL


def rules(kind: str, obj) -> dict:
    """The restart fields of a rendered PyTorchJob, TrainingRuntime or Job, as one record."""
    if kind == "Job":
        return {
            "restartPolicy": obj.spec.template.spec.restart_policy,
            "backoffLimit": obj.spec.backoff_limit,
        }
    if kind == "PyTorchJob":
        specs = obj.spec.pytorch_replica_specs
        return {
            "restartPolicy": {k: v.restart_policy for k, v in specs.items()},
            "backoffLimit": obj.spec.run_policy.backoff_limit,
        }
    policy = obj.spec.template.spec.failure_policy
    return {"failurePolicy.maxRestarts": (policy and policy.max_restarts) or 0}
