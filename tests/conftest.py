"""The session's fixtures (a tiny model per architecture, demo data, its tokenizer, the rank
recorder as an image mounts it) and its hooks: what a session checks when it ends. Helpers the
tests import are in support/; the engine's fixtures in engine/conftest.py."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from support import ci_gate
from support.paths import ROOT
from support.session_end import no_leftover_runs, no_strays

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Builds tiny models on demand, once per session: tiny_models("gpt2") -> Path."""
    from tuning.container.tiny_model import build

    root = tmp_path_factory.mktemp("models")
    made: dict[str, Path] = {}

    def get(arch: str = "llama") -> Path:
        if arch not in made:
            made[arch] = build(root / arch, arch=arch, seed=0)
        return made[arch]

    return get


@pytest.fixture(scope="session")
def tiny_model(tiny_models) -> Path:
    return tiny_models("llama")


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory) -> Path:
    from tuning.container.demo_data import write

    return write(tmp_path_factory.mktemp("data") / "demo.jsonl", n=512, seed=0)


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture
def mounted(tmp_path) -> tuple[Path, dict]:
    """The rank recorder as Compose mounts it in a user's image (harness_rank.py with the
    modules it loads beside it), and a foreign trainer module that writes a marker file when it
    runs (a test may replace user/foreign_trainer.py); support.launch.recorder runs it."""
    from tuning.harness.contract.container import BESIDE_RECORDER

    launch_dir, user = tmp_path / "opt-harness-launch", tmp_path / "user"
    launch_dir.mkdir()
    user.mkdir()
    shutil.copy(ROOT / "tuning/container/rank/rank_record.py", launch_dir / "harness_rank.py")
    for name in BESIDE_RECORDER:  # as Compose mounts them
        shutil.copy(ROOT / "tuning/container/rank" / name, launch_dir / name)
    marker = tmp_path / "trained"
    (user / "foreign_trainer.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    env = {
        **os.environ,
        "PYTHONPATH": f"{launch_dir}{os.pathsep}{user}",
        "HARNESS_WRAPPED_ENTRY": "foreign_trainer",
        "HARNESS_OUTPUT_DIR": str(tmp_path / "out"),
        "RANK": "0",
        "WORLD_SIZE": "1",
    }
    return marker, env


# --- The session's end ----------------------------------------------------------------------
# Container tests never skip: with no engine they fail and say why (CI must prove the
# containers). A quick inner loop deselects them: pytest -m "not docker".

_skipped: list[tuple[str, str]] = []  # (test, why) of each skip that is no machine limit
_container_basetemp: list[Path] = []  # set once a container test ran: its runs live under it


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
        if not ci_gate.machine_limit(reason):
            _skipped.append((report.nodeid, reason))


@pytest.hookimpl(trylast=True)  # after engine/conftest.py has marked its folder's tests
def pytest_collection_modifyitems(config, items):
    # The tests that need no engine first: most take seconds where a container test takes tens,
    # so a broken change shows early, and they overlap CI's image builds (.ci/run builds the
    # images beside them; the image fixtures wait on the build lock). Stable: each group keeps
    # its file order.
    items.sort(key=lambda item: item.get_closest_marker("docker") is not None)


def pytest_configure(config):
    # Every process a test starts inherits this: one that outlives the session is found by it.
    os.environ["HARNESS_TEST_SESSION"] = f"{os.getpid()}-{time.time_ns()}"


@pytest.fixture(autouse=True)
def _note_container_tests(request, tmp_path_factory):
    if request.node.get_closest_marker("docker") and not _container_basetemp:
        _container_basetemp.append(tmp_path_factory.getbasetemp())


def pytest_sessionfinish(session, exitstatus):
    no_strays(session)
    no_leftover_runs(session, _container_basetemp[0] if _container_basetemp else None)
    # In CI every test is the point: one skipped (no engine, not root, no ../shared) is a red
    # run, not a green one, unless the machine lacks what it needs (ci_gate.MACHINE_LIMITS)
    if ci_gate.on() and _skipped and exitstatus == 0:
        print(f"\nCI: {len(_skipped)} test(s) skipped, each a red run here:")
        for test, why in _skipped:
            print(f"  {test}: {why}")
        session.exitstatus = 1
