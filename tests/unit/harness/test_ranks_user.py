"""Who the ranks run as, and MODEL/DATA they cannot read refused before anything starts
(contract/ranks_user.py). Real files, real modes, real credentials: root for the refusals
of uid 1000, and uid 65534 (seteuid) for a user's own run. tests/engine/run/test_second_user.py
runs all of it as a real second user, on the engine."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from support.harness import no_run_recorded, up
from tuning.harness.contract import ranks_user
from tuning.harness.errors import HarnessError

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="uid 1000's access, and seteuid, need root"
)


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    """A model folder as the host checks it (tmp_path's parents are root's, 0700: they must
    not matter, the engine mounts the folder itself)."""
    m = tmp_path / "model"
    m.mkdir()
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (m / name).write_text("{}")
    return m


def test_under_root_the_ranks_are_the_images_user_and_on_the_host_root():
    assert ranks_user.for_ranks("single") == {"user": "1000:1000", "login": None}
    assert ranks_user.for_ranks("per-rank")["user"] == "1000:1000"
    assert ranks_user.for_ranks("host") == {"user": "0:0", "login": "root"}


@pytest.mark.parametrize("layout", ["single", "per-rank"])
def test_root_refuses_a_model_file_uid_1000_cannot_read(tmp_path, model, layout):
    (model / "model.safetensors").chmod(
        0o600
    )  # as save_pretrained writes it (safetensors 0.8: 0600 whatever the umask)
    out = up(tmp_path, "--gpus", "0", "--layout", layout, "--model", str(model))
    assert out.returncode == 2, out.stdout + out.stderr
    assert (
        f"MODEL={model}: the file {model}/model.safetensors is mode 0600, owned by root "
        "(0:0); the ranks, running as 1000:1000 (the image's user: the harness runs as "
        f"root), cannot read it. Fix: `chmod -R o+rX {model}`"
    ) in out.stderr, out.stderr
    assert "run the harness as" not in out.stderr  # root's own file: chmod is the fix
    assert no_run_recorded(tmp_path / "runs") and not (tmp_path / "runs").exists()
    (model / "model.safetensors").chmod(0o644)  # the fix named: it passes (parents are 0700)
    out = up(tmp_path, "--gpus", "0", "--layout", layout, "--model", str(model), "--dry-run")
    assert out.returncode == 0, out.stdout + out.stderr


def test_root_refuses_data_uid_1000_cannot_read_and_the_host_layout_reads_it(tmp_path):
    data = tmp_path / "demo.jsonl"
    data.write_text('{"input": "a", "output": "b"}\n')
    data.chmod(0o640)
    out = up(tmp_path, "--gpus", "0", "--data", str(data))
    assert out.returncode == 2 and f"Fix: `chmod o+r {data}`" in out.stderr, out.stderr
    out = up(tmp_path, "--layout", "host", "--gpus", "0", "--data", str(data), "--dry-run")
    assert out.returncode == 0, out.stdout + out.stderr  # the ranks are root there


@contextlib.contextmanager
def as_uid(uid: int):
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)


def test_a_users_ranks_are_the_user_and_read_only_what_the_user_can():
    tree = Path(tempfile.mkdtemp(prefix="ranks-user-"))  # not under root's 0700 pytest dir
    try:
        tree.chmod(0o755)
        theirs, roots = tree / "theirs.jsonl", tree / "roots.jsonl"
        theirs.write_text("{}\n")
        roots.write_text("{}\n")
        os.chown(theirs, 65534, 65534)
        theirs.chmod(0o600)
        roots.chmod(0o600)
        with as_uid(65534):
            ranks = ranks_user.for_ranks("single")
            assert ranks == {"user": f"65534:{os.getegid()}", "login": "nobody"}
            ranks_user.check_readable("DATA", str(theirs), ranks["user"], "single")
            with pytest.raises(HarnessError) as e:
                ranks_user.check_readable("DATA", str(roots), ranks["user"], "single")
        assert f"the ranks, running as you ({ranks['user']}, in a container" in str(e.value)
        assert "(its owner can), or copy it into a folder of yours" in str(e.value)
    finally:
        shutil.rmtree(tree)
