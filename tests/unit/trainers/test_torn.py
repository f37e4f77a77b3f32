"""Torn checkpoints (issue 23): found and moved aside, never deleted, before every start, by
the one rule, on output dirs built by hand (stdlib only, as tuning/container/rank/torn.py is); the
launcher and a foreign trainer meet none (our trainer's saves, complete under their name or not
there at all, in real runs: test_torn_trainer.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.checkpoints import TORN_NAME, cut, tree
from support.launch import launch_env
from support.paths import ROOT
from tuning.container.rank import torn

COMPLETE = ["trainer_state.json", "model.safetensors", "optimizer.pt", "rng_state.pth"]


def test_incomplete_checkpoints_by_the_one_rule(tmp_path):
    out = tree(
        tmp_path,
        {
            "checkpoint-10": COMPLETE,
            "checkpoint-9x": [],
            "checkpoint-20": ["model.safetensors", "optimizer.pt"],
            "checkpoint-30": ["trainer_state.json", "training_args.bin"],
            "tmp-checkpoint-40": ["model.safetensors"],
            "torn-checkpoint-5-20250101T000000Z": [],
        },
    )
    assert [p.name for p in torn.checkpoints(out)] == [
        "checkpoint-10",
        "checkpoint-20",
        "checkpoint-30",
    ]
    assert [(p.name, why) for p, why in torn.incomplete(out)] == [
        ("checkpoint-20", "no trainer_state.json"),
        ("checkpoint-30", "no weights (model*.safetensors, adapter_model.*, pytorch_model*)"),
        ("tmp-checkpoint-40", "its staging dir: a save that never finished"),
    ]
    # FSDP's sharded weights (a directory) and a LoRA adapter count as weights.
    fsdp = tree(tmp_path / "fsdp", {"checkpoint-1": ["trainer_state.json"]}) / "checkpoint-1"
    (fsdp / "pytorch_model_fsdp_0").mkdir()
    lora = tree(tmp_path / "lora", {"c": ["trainer_state.json", "adapter_model.safetensors"]})
    assert torn.missing(fsdp) is None and torn.missing(lora / "c") is None


@pytest.mark.parametrize(
    "name", ["model.safetensors", "optimizer.pt", "rng_state_1.pth", "training_args.bin"]
)
@pytest.mark.parametrize("keep", [0.0, 0.3, 0.9])
def test_a_checkpoint_with_every_file_but_one_cut_short_is_incomplete(name, keep, tmp_path):
    """Every file present, one cut short (a full disk, an interrupted copy): as incomplete as
    one that lacks a file, and the reason names the file."""
    files = [*COMPLETE, "rng_state_1.pth", "training_args.bin"]
    out = tree(tmp_path, {"checkpoint-10": files, "checkpoint-20": files})
    cut(out / "checkpoint-20" / name, keep)
    assert torn.missing(out / "checkpoint-10") is None
    why = torn.missing(out / "checkpoint-20")
    assert why is not None and why.startswith(f"{name} is cut short: "), why
    assert [p.name for p, _ in torn.incomplete(out)] == ["checkpoint-20"]


def test_a_safetensors_file_whose_data_ends_early_is_cut_short(tmp_path):
    out = tree(tmp_path, {"checkpoint-1": COMPLETE})
    f = out / "checkpoint-1/model.safetensors"
    f.write_bytes(f.read_bytes()[:-3])  # the header whole, the last tensor three bytes short
    assert torn.unreadable(f).startswith("is cut short: ") and "header says" in torn.unreadable(f)


def test_dcp_shards_need_their_metadata_written_last(tmp_path):
    """FSDP's SHARDED_STATE_DICT (torch.distributed.checkpoint): shards, then .metadata, which
    is read (tests/unit/trainers/test_torn_bytes.py: a real one, and each file cut at several
    offsets)."""
    out = tree(tmp_path, {"checkpoint-1": ["trainer_state.json"]})
    dcp = out / "checkpoint-1/pytorch_model_fsdp_0"
    dcp.mkdir()
    (dcp / "__0_0.distcp").write_bytes(b"x" * 64)
    (dcp / "__1_0.distcp").write_bytes(b"x" * 10)
    assert "no .metadata" in torn.missing(out / "checkpoint-1")
    (dcp / ".metadata").write_bytes(b"m" * 16)  # the case: it used to count as complete
    why = torn.missing(out / "checkpoint-1")
    assert why.startswith("pytorch_model_fsdp_0 has a .metadata that cannot be read ("), why


def test_move_aside_renames_never_deletes(tmp_path, capsys):
    out = tree(
        tmp_path,
        {
            "checkpoint-10": COMPLETE,
            "checkpoint-20": ["model.safetensors"],
            "tmp-checkpoint-30": ["model.safetensors"],
        },
    )
    moved = torn.move_aside(out)
    assert [(m["checkpoint"], m["why"]) for m in moved] == [
        ("checkpoint-20", "no trainer_state.json"),
        ("tmp-checkpoint-30", "its staging dir: a save that never finished"),
    ]
    assert all(TORN_NAME.fullmatch(m["moved_to"]) for m in moved), moved
    assert [p.name for p in torn.checkpoints(out)] == ["checkpoint-10"]
    assert torn.moved(out) == sorted(m["moved_to"] for m in moved)
    kept = out / moved[0]["moved_to"] / "model.safetensors"
    assert torn.unreadable(kept) is None  # every file still there, as it was
    said, first = capsys.readouterr().out, moved[0]["moved_to"]
    assert f"checkpoint-20 is incomplete (no trainer_state.json): moved aside to {first}" in said
    assert torn.move_aside(out) == []  # nothing left: a second start moves nothing
    # The same checkpoint torn again in the same second gets a name of its own.
    tree(out, {"checkpoint-20": []})
    again = torn.move_aside(out)[0]["moved_to"]
    assert again != moved[0]["moved_to"] and len(torn.moved(out)) == 3


def test_transformers_passes_the_moved_and_staged_names_by(tmp_path):
    """get_last_checkpoint (what the trainers resume from) and rotate_checkpoints (which
    deletes) both see checkpoint-N only: a torn one moved aside is neither loaded nor deleted."""
    from transformers.trainer_utils import get_last_checkpoint, rotate_checkpoints

    out = tree(
        tmp_path,
        {
            "checkpoint-10": COMPLETE,
            "checkpoint-20": COMPLETE,
            "checkpoint-30": ["model.safetensors"],
            "tmp-checkpoint-40": ["model.safetensors"],
        },
    )
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-30")  # the cause
    torn.move_aside(out)
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-20")
    rotate_checkpoints(str(out), save_total_limit=1)
    left = sorted(p.name for p in out.iterdir())  # checkpoint-10 rotated away, not these
    assert left == ["checkpoint-20", *torn.moved(out)] and len(left) == 3, left


def test_other_ranks_wait_for_rank_0_then_go_on(tmp_path):
    out = tree(tmp_path, {"checkpoint-10": COMPLETE, "checkpoint-20": ["model.safetensors"]})
    assert torn.sweep(out, rank=1, wait_s=0.5) == []  # gave up waiting, moved nothing
    assert (out / "checkpoint-20").is_dir()
    assert [m["checkpoint"] for m in torn.sweep(out, rank=0)] == ["checkpoint-20"]
    assert torn.sweep(tmp_path / "absent", rank=0) == []


def test_command_line(tmp_path):
    out = tree(tmp_path, {"checkpoint-20": ["model.safetensors"]})
    run = subprocess.run(
        [sys.executable, str(ROOT / "tuning/container/rank/torn.py"), str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0 and "checkpoint-20 is incomplete" in run.stdout, run.stderr
    bad = subprocess.run(
        [sys.executable, str(ROOT / "tuning/container/rank/torn.py"), str(tmp_path / "no")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "is not a directory" in bad.stderr


def test_the_launcher_moves_them_on_node_0_only(tmp_path):
    """tuning/container/launch.py before it starts a node's group (a restarted container or pod)."""
    from tuning.container import launch

    out = tree(tmp_path, {"checkpoint-20": ["model.safetensors"]})
    launch.sweep_torn({"PET_NODE_RANK": "1", "HARNESS_OUTPUT_DIR": str(out)})
    assert torn.moved(out) == []
    launch.sweep_torn({"PET_NODE_RANK": "0", "HARNESS_OUTPUT_DIR": str(out)})
    assert [m.split("-2")[0] for m in torn.moved(out)] == ["torn-checkpoint"]


def test_a_foreign_trainer_meets_no_torn_checkpoint(tmp_path):
    """The rank recorder (what a foreign trainer such as fms runs under) moves them before the
    trainer's module runs; the module here lists what get_last_checkpoint's rule would see."""
    out = tree(tmp_path / "out", {"checkpoint-10": COMPLETE, "checkpoint-20": []})
    (tmp_path / "lister.py").write_text(
        "import os\nprint(sorted(d for d in os.listdir(os.environ['HARNESS_OUTPUT_DIR'])"
        " if d.startswith('checkpoint-')))\n"
    )
    env = {
        **launch_env(),
        "HARNESS_OUTPUT_DIR": str(out),
        "HARNESS_WRAPPED_ENTRY": "lister",
        "RANK": "0",
        "PYTHONPATH": str(tmp_path),
    }
    run = subprocess.run(
        [sys.executable, str(ROOT / "tuning/container/rank/rank_record.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    said = run.stdout.splitlines()
    assert said[0].startswith(f"harness-torn: {out}/checkpoint-20 is incomplete"), said
    assert said[1] == "['checkpoint-10']"
