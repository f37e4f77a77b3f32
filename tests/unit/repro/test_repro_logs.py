"""`make repro` on log sets in the formats of producers we did not write
(tests/support/repro_logs.py builds them from torch's, torchrun's and gloo's format strings,
version by version): the class and the culprit named as the logs show them, through the
verdict code live runs use (every case the logs cannot tell says so, names nobody, and exits 2:
test_repro_make.py)."""

from __future__ import annotations

import random

import pytest

from support import repro_logs as R
from support.repro_logs import judged, verdict_of, watchdog_job

VERSIONS = ["2.1", "2.3", "2.4", "2.6", "2.12", "2.13"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("silent", [2, 0])
def test_nccl_watchdog_names_the_rank_that_never_entered(version, silent, tmp_path):
    folder = R.write(tmp_path / "logs", watchdog_job(version, silent))
    rec = judged(folder)
    v = rec["verdict"]
    assert (v["class"], v["culprits"]) == ("never arrived", [silent]), v
    assert "all_reduce #1580" in v["evidence"], v["evidence"]
    assert rec["read"]["step"] == 151


def interleave(lines: list[str], rng: random.Random) -> list[str]:
    """Each rank's lines (and the launcher's) as streams merged at random: one writer's lines
    keep their order, as in a pod's log where several processes write at once."""
    streams: dict[str, list[str]] = {}
    for x in lines:
        key = x[: x.index("]:")] if x.startswith("[rank") else "launcher"
        streams.setdefault(key, []).append(x)
    out = []
    while any(streams.values()):
        key = rng.choice([k for k, v in streams.items() if v])
        out.append(streams[key].pop(0))
    return out


def test_interleaved_and_truncated_logs_read_the_same(tmp_path):
    logs = watchdog_job("2.6", 3, world=8, nproc=4)
    rng = random.Random(5)
    logs = {name: interleave(lines, rng) for name, lines in logs.items()}
    folder = R.write(tmp_path / "logs", logs)
    text = (folder / "sft-worker-0.log").read_text()
    (folder / "sft-worker-0.log").write_text(text[: int(len(text) * 0.97)])  # cut mid-line
    assert verdict_of(folder) == ("never arrived", [3])


@pytest.mark.parametrize("version", ["2.1", "2.6", "2.13"])
def test_gloo_timeouts_name_the_rank_outside_the_collective(version, tmp_path):
    err = (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
        "waiting 1800000ms for recv operation to complete"
    )
    logs = {
        f"sft-worker-{r - 1}" if r else "sft-master-0": R.traceback(version, r, err)
        for r in (0, 1, 3)
    }
    logs["sft-worker-1"] = (
        ["[rank2]: loading shard 7 of 9"] if R.v(version) >= (2, 3) else ["loading shard 7 of 9"]
    )
    folder = R.write(tmp_path / "logs", logs)
    assert verdict_of(folder) == ("never arrived", [2])


@pytest.mark.parametrize("cgroup", ["v2: the whole container", "v1: one worker"])
def test_an_oomkilled_pod_is_named_not_torchruns_root_cause(cgroup, tmp_path):
    """A pod of 2 ranks OOM-killed; the others end on a reset connection, and each torchrun
    names its own first failure as the root cause."""
    reset = "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [10.0.0.7]:41234: Connection reset by peer"
    logs, pods = {}, []
    for node, name in enumerate(["sft-master-0", "sft-worker-0", "sft-worker-1"]):
        ranks = (2 * node, 2 * node + 1)
        if node == 1 and cgroup.startswith("v2"):
            logs[name] = [R.tqdm(40, 100)]  # the log just stops: the kernel killed it all
            pods.append(R.pod(name, node, 2, 3, 137, "OOMKilled", "2024-12-05T02:07:05Z"))
            continue
        if node == 1:  # one worker (rank 3) killed; torchrun SIGTERMs rank 2 and exits 1
            logs[name] = [
                R.agent("2.6", "Sending process 102 closing signal SIGTERM"),
                *R.child_failed(
                    "2.6",
                    [(2, 0, -15, "2024-12-05_02:07:05"), (3, 1, -9, "2024-12-05_02:07:05")],
                    2,
                ),
            ]
            pods.append(R.pod(name, node, 2, 3, 1, "OOMKilled", "2024-12-05T02:07:05Z"))
            continue
        logs[name] = [x for r in ranks for x in R.traceback("2.6", r, reset)]
        logs[name] += R.child_failed(
            "2.6", [(r, r % 2, 1, "2024-12-05_02:07:07") for r in ranks], ranks[0]
        )
        pods.append(R.pod(name, node, 2, 3, 1, "Error", "2024-12-05T02:07:08Z"))
    folder = R.write(tmp_path / "logs", logs, pods)
    want = [2, 3] if cgroup.startswith("v2") else [3]
    v = judged(folder)["verdict"]
    assert (v["class"], v["culprits"]) == ("died", want), v
    assert "OOM" in v["evidence"] or "SIGKILL" in v["evidence"]


def test_one_ranks_traceback_then_broken_pipes(tmp_path):
    bug = "ValueError: Expected input batch_size (8) to match target batch_size (7)."
    pipe = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.5]:6000"
    logs = {
        "sft-master-0": R.traceback("2.4", 0, pipe),
        "sft-worker-0": R.traceback("2.4", 1, bug, call="broadcast"),
        "sft-worker-1": R.traceback("2.4", 2, pipe),
    }
    v = judged(R.write(tmp_path / "logs", logs))["verdict"]
    assert (v["class"], v["culprits"]) == ("died", [1])
    assert "raised ValueError: Expected input batch_size" in v["evidence"]


@pytest.mark.parametrize(
    "how", ["status: Evicted", "condition: preempted", "launcher: death signal"]
)
def test_a_pod_stopped_from_outside_is_the_culprit(how, tmp_path):
    reset = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [10.0.0.7]:41234: Connection reset by peer"
    logs = {
        "sft-master-0": R.traceback("2.13", 0, reset),
        "sft-worker-1": R.traceback("2.13", 2, reset),
        "sft-worker-0": [R.tqdm(12, 50)],
    }
    evicted = {}
    if how == "status: Evicted":
        evicted = {"reason": "Evicted", "message": "The node was low on resource: memory. "}
    elif how == "condition: preempted":
        evicted = {
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "default-scheduler: preempting to accommodate a higher priority pod",
                }
            ]
        }
    else:  # the launcher's line says when, read with `kubectl logs --timestamps`
        logs["sft-worker-0"].append(
            R.agent("2.13", "Received 15 death signal, shutting down workers")
        )
        for name, lines in logs.items():
            t = "2024-12-05T02:07:01.5Z " if name == "sft-worker-0" else "2024-12-05T02:07:04.1Z "
            logs[name] = [t + x for x in lines]
    pods = [
        R.pod("sft-master-0", 0, 1, 3, 1),
        R.pod("sft-worker-1", 2, 1, 3, 1),
        R.pod("sft-worker-0", 1, 1, 3, 143, "Error", **evicted),
    ]
    v = judged(R.write(tmp_path / "logs", logs, pods))["verdict"]
    assert (v["class"], v["culprits"]) == ("stopped from outside", [1]), v
    assert "was stopped from outside" in v["evidence"]


@pytest.mark.parametrize("why", ["pending", "late", "no name"])
def test_a_rendezvous_that_never_completed(why, tmp_path):
    master = [
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined."
    ]
    logs, pods = (
        {"sft-master-0": master},
        [R.pod("sft-master-0", 0, 1, 2, 1, finished="2024-12-05T02:15:01Z")],
    )
    if why == "pending":
        pods.append(R.pod("sft-worker-0", 1, 1, 2, None, waiting="ImagePullBackOff"))
    elif why == "late":
        logs["sft-worker-0"] = [
            "The client socket has failed to connect to any network address of (sft-master-0, 23456)"
        ]
        pods.append(
            R.pod(
                "sft-worker-0",
                1,
                1,
                2,
                1,
                started="2024-12-05T02:20:00Z",
                finished="2024-12-05T02:30:00Z",
            )
        )
    else:
        logs["sft-worker-0"] = [
            "[W1205 02:00:01.609693087 socket.cpp:764] [c10d] The IPv6 network addresses of (sft-master-0, 23456) cannot be retrieved (gai error: -2 - Name or service not known)."
        ] * 3
    v = judged(R.write(tmp_path / "logs", logs, pods))["verdict"]
    want = "network" if why == "no name" else "never arrived"
    assert (v["class"], v["culprits"]) == (want, [1]), v


def test_torchs_detail_check_names_the_odd_rank(tmp_path):
    def fp(op, shape):
        return f"CollectiveFingerPrint(SequenceNumber=3, OpType={op}, TensorShape=[{shape}], TensorDtypes=Float)"

    logs = {}
    for r in range(4):
        mine, other = (
            (fp("BROADCAST", 4), fp("ALLREDUCE", 4))
            if r == 3
            else (fp("ALLREDUCE", 4), fp("BROADCAST", 4))
        )
        peer = 0 if r == 3 else 3
        err = f"RuntimeError: Detected mismatch between collectives on ranks. Rank {r} is running collective: {mine}, but Rank {peer} is running collective: {other}"
        logs[f"sft-worker-{r - 1}" if r else "sft-master-0"] = R.traceback("2.6", r, err)
    v = judged(R.write(tmp_path / "logs", logs))["verdict"]
    assert (v["class"], v["culprits"], v["rule"]) == ("desync", [3], "torch")


def test_torchruns_stopped_workers_count_toward_the_world(tmp_path):
    """One pod of 8: one worker failed, torchrun stopped the other seven (its SIGTERM lines name
    PIDs, not ranks): 8 ranks, the seven stopped, not completed; rank 3 named."""
    lines = R.traceback("2.6", 3, "ValueError: record 49 has no target")
    lines += [R.agent("2.6", f"Sending process {200 + i} closing signal SIGTERM") for i in range(7)]
    lines += R.child_failed("2.6", [(3, 3, 1, "2024-12-05_02:07:08")], 3)
    rec = judged(R.write(tmp_path / "logs", {"sft-master-0": lines}))
    assert rec["read"]["world_size"] == 8, rec["read"]
    assert (rec["verdict"]["class"], rec["verdict"]["culprits"]) == ("died", [3]), rec
    assert "completed" not in rec["verdict"]["evidence"], rec["verdict"]


@pytest.mark.parametrize(
    "line, step",
    [
        ("Train:  20%|##        | 230/1142 [10:02<39:48,  2.62s/it]", 230),
        ("1|101|Loss: 0.5332:  10%|#         | 101/1000 [05:01<44:40,  2.98s/it]", 101),
        ("{'loss': 1.35, 'global_step/max_steps': '10/1000', 'percentage': '1.00%'}", 10),
        (" iteration      230/   10000 | consumed samples:        58880 |", 230),
        ("Map: 100%|##########| 5000/5000 [00:01<00:00, 4000.00 examples/s]", None),
    ],
)
def test_progress_as_trainers_print_it(line, step):
    from tuning.harness.clusterlogs import log_lines

    got = log_lines.progress(line)
    assert (got[0] if got else None) == step


def test_pods_still_running_with_nothing_failed_are_a_hang(tmp_path):
    logs = {"sft-master-0": [R.tqdm(151, 1000)], "sft-worker-0": ["[rank1]: step"]}
    pods = _running([R.pod("sft-master-0", 0, 1, 2, 1), R.pod("sft-worker-0", 1, 1, 2, 1)])
    rec = judged(R.write(tmp_path / "logs", logs, pods))
    assert rec["could_not_tell"][0].startswith("hung, nothing failed yet"), rec
    assert rec["hung"]["pods"] == ["sft-master-0", "sft-worker-0"]
    from tuning.harness.clusterlogs import write
    from tuning.harness.clusterlogs.repro_json import ReproRecord

    said = "\n".join(write.said(ReproRecord.from_json(rec)))
    assert "kubectl debug -it sft-worker-0" in said and "TORCH_NCCL_DEBUG_INFO_PIPE_FILE" in said


def test_torchruns_summary_holds_the_error_of_a_worker_under_record(tmp_path):
    """torch 2.1, one pod of 4, no [rankN]: prefixes: the tracebacks in the log name no rank,
    but torchrun's summary of a worker run under @record holds its error file's exception."""
    summary = R.child_failed("2.1", [(2, 2, 1, "2024-12-05_02:07:08")], 2)
    at = next(i for i, x in enumerate(summary) if x.startswith("  traceback"))
    summary[at : at + 1] = [
        "  traceback : Traceback (most recent call last):",
        '    File "/src/train.py", line 88, in <module>',
        "      main()",
        "  ValueError: record 49 has no target",
    ]
    lines = [R.agent("2.1", f"Sending process {300 + i} closing signal SIGTERM") for i in range(3)]
    rec = judged(R.write(tmp_path / "logs", {"sft-master-0": lines + summary}))
    v = rec["verdict"]
    assert (v["class"], v["culprits"], rec["read"]["world_size"]) == ("died", [2], 4), rec
    assert "ValueError: record 49 has no target" in v["evidence"]


def _running(pods: list[dict]) -> list[dict]:
    for p in pods:
        p["status"]["containerStatuses"][0]["state"] = {
            "running": {"startedAt": "2024-12-05T01:00:00Z"}
        }
        p["status"]["phase"] = "Running"
    return pods


@pytest.mark.parametrize("version", ["2.1", "2.4", "2.6"])
@pytest.mark.parametrize("aborted", [False, True])
def test_a_rank_that_timed_out_alone_in_a_job_that_ran_on(version, aborted, tmp_path):
    """Rank 3 of 4 times out; ranks 0, 1, 2 print no timeout; the pods still run. Where its
    process was not taken down (pytorch#97191), the others did not wait in that collective:
    rank 3 is the odd one. Where it was (std::terminate's what():), the job's end may have come
    before the others' timeouts: nothing is named."""
    lines = [x for x in R.watchdog(version, 3, 42) if aborted or "what()" not in x]
    lines = [x for x in lines if aborted or not x.startswith("terminate called")]
    logs = {"sft-master-0": ["[rank0]: " + R.tqdm(7, 100)], "sft-worker-0": lines}
    pods = _running([R.pod("sft-master-0", 0, 2, 2, 1), R.pod("sft-worker-0", 1, 2, 2, 1)])
    rec = judged(R.write(tmp_path / "logs", logs, pods))
    v = rec["verdict"]
    if aborted:
        assert v["culprits"] == [], v
        return
    assert (v["class"], v["culprits"]) == ("desync", [3]), v
    assert "waited alone in all_reduce #42" in v["evidence"], v["evidence"]
    assert any("before the others' own timeouts" in x for x in rec["caveats"]), rec
    rec = judged(R.write(tmp_path / "bare", logs))  # no pods.yaml: ranks 1 and 2 not known
    assert rec["verdict"]["culprits"] == [], rec["verdict"]
    assert any("no log and no object of rank(s) 1, 2" in x for x in rec["could_not_tell"]), rec


def _restarted(pod: dict, began: str, ended: str, code: int, again: str) -> dict:
    """A pod whose container ended (lastState) and runs again since `again`."""
    cs = pod["status"]["containerStatuses"][0]
    cs["restartCount"] = 1
    cs["lastState"] = {
        "terminated": {"exitCode": code, "reason": "Error", "startedAt": began, "finishedAt": ended}
    }
    cs["state"] = {"running": {"startedAt": again}}
    pod["status"]["phase"] = "Running"
    return pod


@pytest.mark.parametrize("replaced", [True, False])
def test_pods_that_restarted_are_judged_on_the_attempt_before(replaced, tmp_path):
    """Both pods run again and their newest logs show training: the restart is what failed.
    Rank 0's attempt before lost its peer. Where rank 1's pod began only as rank 0's attempt
    ended (kubectl delete, an eviction: a pod made anew, no log of the one before), rank 1 is
    named stopped from outside; where both began together, its own crash is in its log."""
    peer = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.9]:4312"
    crash = "ValueError: bad record 88"
    t1 = "2024-12-05T01:30:00Z" if replaced else "2024-12-05T01:00:03Z"
    logs = {
        "sft-worker-0.previous": [R.tqdm(40, 100), *R.traceback("2.1", 0, peer)],
        "sft-worker-0": [R.tqdm(2, 100)],
        "sft-worker-1.previous": ["starting"] if replaced else [*R.traceback("2.1", 1, crash)],
        "sft-worker-1": [R.tqdm(2, 100)],
    }
    pods = [
        _restarted(
            R.pod("sft-worker-0", 0, 1, 2, 1),
            "2024-12-05T01:00:00Z",
            "2024-12-05T01:30:01Z",
            1,
            "2024-12-05T01:30:30Z",
        ),
        _restarted(
            R.pod("sft-worker-1", 1, 1, 2, 1), t1, "2024-12-05T01:30:01Z", 1, "2024-12-05T01:30:31Z"
        ),
    ]
    rec = judged(R.write(tmp_path / "logs", logs, pods))
    v = rec["verdict"]
    assert any("the attempt before is judged" in x for x in rec["caveats"]), rec
    if replaced:
        assert (v["class"], v["culprits"]) == ("stopped from outside", [1]), v
        assert "began anew" in v["evidence"], v["evidence"]
    else:
        assert (v["class"], v["culprits"]) == ("died", [1]), v
