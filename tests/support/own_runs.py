"""What this test session left on the engine, and only that: the harness's containers, networks
and volumes whose RUNS folder (their `harness.runs` label) lies under the session's base temp
folder, where every test's tmp_path is. Each test removes its own runs; one found here leaked,
and is named and removed (it is this session's: another checkout's or another user's run, or a
run of this checkout's runs/, never is), and the session is red."""

from __future__ import annotations

from pathlib import Path


def sweep(basetemp: Path) -> list[str]:
    """Remove what runs under `basetemp` left (`make down` of that folder, as the harness
    selects it); returns what it removed, in words."""
    from tuning.harness.backends import engine
    from tuning.harness.errors import HarnessError

    try:
        client = engine.client()
    except HarnessError:  # no engine: no container test ran, nothing can be left
        return []
    gone = engine.remove_labelled(client, runs=str(basetemp.resolve()))
    return [f"{thing} of run {run_id}" for run_id, things in gone.items() for thing in things]


if __name__ == "__main__":  # .ci/run: what CI's tests left, when pytest could not sweep it
    import sys

    for line in sweep(Path(sys.argv[1])):
        print(f"ci: removed {line}")
