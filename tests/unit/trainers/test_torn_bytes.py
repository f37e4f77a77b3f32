"""Checkpoints verified to the byte (issue 40, item 4): files written by torch itself (a DCP
folder, a safetensors file, a torch.save zip), each cut at several offsets, and what
tuning/container/rank/torn.py says of them. A DCP folder's `.metadata` is read (its storage entries)
with a restricted unpickler, never importing torch: torn.py runs where torch is not (the host, a
user's image)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from support.paths import ROOT
from tuning.container.rank import torn

DCP = "pytorch_model_fsdp_0"  # where FSDP's SHARDED_STATE_DICT saves (accelerate)
SHARD = f"{DCP}/__0_0.distcp"


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """A complete checkpoint of real files: DCP weights saved by one process (no process
    group), a safetensors file and a torch.save zip."""
    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file

    ckpt = tmp_path_factory.mktemp("whole") / "checkpoint-10"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 10}))
    state = {"w": torch.arange(12.0).reshape(3, 4), "b": torch.ones(5), "step": 10}
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore")
        dcp.save({"model": state}, checkpoint_id=ckpt / DCP)
    save_file({"w": state["w"], "b": state["b"]}, ckpt / "model.safetensors")
    torch.save({"state": {0: {"exp_avg": torch.zeros(64)}}}, ckpt / "optimizer.pt")
    assert torn.missing(ckpt) is None
    return ckpt


@pytest.fixture
def ckpt(whole, tmp_path) -> Path:
    return Path(shutil.copytree(whole, tmp_path / whole.name))


def cut_to(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def offsets(size: int) -> list[int]:
    return sorted({0, 1, 10, size // 2, size - 1})


class Hostile:
    """Pickles as a call of `call` with `args`."""

    def __init__(self, call, args: tuple):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


def test_the_storage_entries_are_torchs_own(whole):
    from torch.distributed.checkpoint import FileSystemReader

    storage = FileSystemReader(whole / DCP).read_metadata().storage_data
    want = sorted((s.relative_path, s.offset, s.length) for s in storage.values())
    assert sorted(torn.dcp_entries(whole / DCP / ".metadata")) == want
    assert max(o + n for _, o, n in want) == (whole / SHARD).stat().st_size  # to its last byte


def test_an_enum_pickled_by_name_as_the_images_python_does(tmp_path, monkeypatch):
    """The image's Python (3.11.2) pickles an Enum member as getattr(its class, its name), as
    TensorProperties' memory format: getattr is taken on torch's stand-ins, and only there."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING

    def by_name(self, proto):
        return getattr, (type(self), self._name_)

    monkeypatch.setattr(_MEM_FORMAT_ENCODING, "__reduce_ex__", by_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"w": torch.ones(3)}, checkpoint_id=tmp_path / "dcp")
    meta = tmp_path / "dcp/.metadata"
    assert b"getattr" in meta.read_bytes()
    storage = FileSystemReader(tmp_path / "dcp").read_metadata().storage_data
    want = sorted((s.relative_path, s.offset, s.length) for s in storage.values())
    assert sorted(torn.dcp_entries(meta)) == want
    meta.write_bytes(pickle.dumps(Hostile(getattr, ("text", "upper"))))
    with pytest.raises(torn.NotDcp, match="it calls getattr on str, not on torch's types"):
        torn.dcp_entries(meta)


def test_the_reader_needs_no_torch(whole):
    """As the harness binds torn.py into a user's image: alone, with no site-packages (-S)."""
    code = (
        "import sys, torn; print(torn.missing(sys.argv[1])); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    run = subprocess.run(
        [sys.executable, "-S", "-c", code, str(whole)],
        capture_output=True,
        text=True,
        cwd=ROOT / "tuning/container/rank",
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["None", "[]"]


def test_a_dcp_shard_cut_anywhere_is_named_with_its_bytes(ckpt):
    data = (ckpt / SHARD).read_bytes()
    for keep in offsets(len(data)):
        (ckpt / SHARD).write_bytes(data[:keep])
        assert torn.missing(ckpt) == (
            f"{DCP} has __0_0.distcp cut short: {keep} bytes where its .metadata names {len(data)}"
        )
    (ckpt / SHARD).write_bytes(data)
    assert torn.missing(ckpt) is None


def test_a_shard_the_metadata_names_must_be_there(ckpt):
    (ckpt / SHARD).unlink()  # no .distcp left: the folder is checked for its .metadata alone
    assert torn.missing(ckpt) == f"{DCP} lacks __0_0.distcp, a shard its .metadata names"


def test_a_dcp_metadata_cut_anywhere_cannot_be_read(ckpt):
    meta = ckpt / DCP / ".metadata"
    data = meta.read_bytes()
    for keep in offsets(len(data)):
        meta.write_bytes(data[:keep])
        why = torn.missing(ckpt)
        if keep == 0:
            assert why.startswith(f"{DCP} has no .metadata (or an empty one)"), why
        else:
            assert why.startswith(f"{DCP} has a .metadata that cannot be read ("), (keep, why)


def test_the_issues_case_garbage_metadata_beside_a_10_byte_shard(ckpt):
    cut_to(ckpt / SHARD, 10)
    (ckpt / DCP / ".metadata").write_bytes(b"m" * 16)
    assert torn.missing(ckpt).startswith(f"{DCP} has a .metadata that cannot be read (")


def test_a_pickle_other_than_dcps_is_refused_and_never_run(ckpt, tmp_path):
    meta = ckpt / DCP / ".metadata"
    meta.write_bytes(pickle.dumps({"storage_data": {}}))
    said = f"{DCP} has a .metadata that is not DCP's: it holds a dict, not {torn.METADATA}"
    assert torn.missing(ckpt) == said
    marker = tmp_path / "ran"
    meta.write_bytes(pickle.dumps(Hostile(os.system, (f"touch {marker}",))))
    said = f"it loads {os.name}.system, not torch's checkpoint types"
    assert torn.missing(ckpt) == f"{DCP} has a .metadata that is not DCP's: {said}"
    assert not marker.exists()


def test_an_entry_outside_its_folder_is_refused(ckpt):
    meta = ckpt / DCP / ".metadata"
    data = meta.read_bytes()
    assert data.count(b"__0_0.distcp") >= 1
    meta.write_bytes(data.replace(b"__0_0.distcp", b"../_0.distcp"))  # same length
    said = "a storage entry names ../_0.distcp, outside its folder"
    assert torn.missing(ckpt) == f"{DCP} has a .metadata that is not DCP's: {said}"


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.pt"])
def test_a_safetensors_or_torch_file_cut_anywhere_is_cut_short(ckpt, name):
    path = ckpt / name
    data = path.read_bytes()
    header = 8 + int.from_bytes(data[:8], "little") if name.endswith(".safetensors") else 30
    for keep in sorted({*offsets(len(data)), 7, 8, header - 1, header, len(data) - 22}):
        path.write_bytes(data[:keep])
        why = torn.missing(ckpt)
        assert why is not None and why.startswith(f"{name} is cut short: "), (keep, why)
    path.write_bytes(data)
    assert torn.missing(ckpt) is None
