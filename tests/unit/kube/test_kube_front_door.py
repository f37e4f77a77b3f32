"""`make kube` renders what a real cluster admits, and refuses what it would render wrong
(issue 50): a local image said on the terminal and in the manifest (never `:latest` with
IfNotPresent), NAMESPACE on every object, OUT=- for `kubectl apply -f -`, KUBE_UID=auto for a
platform that assigns the uid (the Pod Security "restricted" profile holds either way: its
checks in tests/support/kube_objects.py follow k8s.io/pod-security-admission's policy), limits
beside requests, /dev/shm by the ranks, SRC of one file, and no dotfile or secret in a
ConfigMap."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from support.kube_objects import check_restricted
from tuning.harness import cli


def kube(tmp_path: Path, capsys, *words: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `make kube GPUS=0 ...` in this process."""
    code = cli.main(["kube", "--runs", str(tmp_path / "runs"), "--gpus", "0", *words])
    out, err = capsys.readouterr()
    return code, out, err


def pods(text: str) -> list[dict]:
    """Every pod spec in the objects (PyTorchJob replicas, a Job's template, a runtime's)."""
    out = []

    def walk(x):
        if isinstance(x, dict):
            if "containers" in x and "volumes" in x:
                out.append(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for doc in yaml.safe_load_all(text):
        walk(doc)
    return out


@pytest.mark.parametrize("kind", ["PyTorchJob", "trainjob", "JOB"])
def test_out_dash_prints_the_objects_it_would_write(kind, tmp_path, capsys):
    code, out, err = kube(tmp_path, capsys, "--kind", kind, "--out", "-", "--run-id", "r1")
    assert code == 0, err
    assert not (tmp_path / "runs").exists()  # nothing written
    assert "\nharness: " not in out and "harness: " in err  # what it says: on stderr
    code, said, err = kube(tmp_path, capsys, "--kind", kind, "--run-id", "r1")
    assert code == 0, err
    assert Path(said.strip().splitlines()[-1]).read_text() == out


@pytest.mark.parametrize("uid", [None, "auto", "1001:0"])
@pytest.mark.parametrize("kind", ["pytorchjob", "trainjob", "job"])
def test_every_pod_is_restricted_and_auto_leaves_the_uid_to_the_platform(
    kind, uid, tmp_path, capsys
):
    words = ("--kind", kind, "--out", "-", "--output-claim", "ckpt", "--namespace", "team-ml")
    code, out, err = kube(tmp_path, capsys, *words, *(("--kube-uid", uid) if uid else ()))
    assert code == 0, err
    assert all(d["metadata"]["namespace"] == "team-ml" for d in yaml.safe_load_all(out))
    found = pods(out)
    assert found
    for pod in found:
        check_restricted(pod)
        users = {c["securityContext"].get("runAsUser") for c in pod["containers"]}
        if uid == "auto":
            assert users == {None} and "fsGroup" not in pod["securityContext"]
        else:
            assert users == {int((uid or "1000:1000").split(":")[0])}
            assert pod["securityContext"]["fsGroup"] == int((uid or "1000:1000").split(":")[1])


def test_a_local_image_is_said_and_never_latest_with_if_not_present(tmp_path, capsys):
    code, out, err = kube(tmp_path, capsys, "--out", "-")
    assert code == 0, err
    assert out.startswith("# IMAGE tuning-harness:latest is this machine's local tag")
    assert "warning: IMAGE tuning-harness:latest is this machine's local tag" in err
    (ctr,) = pods(out)[0]["containers"]
    assert ctr["imagePullPolicy"] == "Always"
    code, out, err = kube(tmp_path, capsys, "--out", "-", "--image", "quay.io/me/t:1.2")
    assert code == 0 and not out.startswith("#") and "local tag" not in err
    assert pods(out)[0]["containers"][0]["imagePullPolicy"] == "IfNotPresent"


@pytest.mark.parametrize(
    "words, said",
    [
        (("--nproc", "100000"), "NPROC=100000 ranks in one pod"),
        (("--gpus", "8", "--nproc", "4"), "NPROC=4 is CPU ranks per pod; with GPUS=8"),
        (("--model", "/nonexistent"), "on neither this machine nor a claim"),
        (("--namespace", "Team_ML"), "NAMESPACE='Team_ML'"),
        (("--kube-uid", "0:0"), "KUBE_UID='0:0'"),
        (("--kind", "cronjob"), "KIND=cronjob is unknown"),
    ],
)
def test_what_it_would_render_wrong_is_refused_by_name(words, said, tmp_path, capsys):
    code, out, err = kube(tmp_path, capsys, *words)
    assert code == 2 and said in err, err
    assert not (tmp_path / "runs").exists()


def test_src_of_one_file_ships_it_alone_and_no_dotfile_or_secret_ever_ships(tmp_path, capsys):
    code_dir = tmp_path / "proj"
    code_dir.mkdir()
    (code_dir / "train.py").write_text("print('trains')\n")
    (code_dir / "tokenizer_utils.py").write_text("x = 1\n")
    for secret in (".env", "id_rsa", "server.key", "hf_token.txt"):
        (code_dir / secret).write_text("s3cr3t\n")
    image = ("--image", "quay.io/me/t:1")
    code, out, err = kube(
        tmp_path, capsys, *image, "--src", str(code_dir), "--entry", "train.py", "--out", "-"
    )
    assert code == 0, err
    src_map = next(d for d in yaml.safe_load_all(out) if d["metadata"]["name"].endswith("-src"))
    shipped = sorted(src_map["data"].values())
    assert "s3cr3t\n" not in shipped and len(shipped) == 2, shipped
    assert "left out of the ConfigMap" in err
    for secret in (".env", "id_rsa", "server.key", "hf_token.txt"):
        assert secret in err
    code, out, err = kube(
        tmp_path, capsys, *image, "--src", str(code_dir / "train.py"), "--out", "-"
    )
    assert code == 0, err
    src_map = next(d for d in yaml.safe_load_all(out) if d["metadata"]["name"].endswith("-src"))
    assert list(src_map["data"].values()) == ["print('trains')\n"]
