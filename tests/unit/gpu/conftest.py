"""The GPU tests run on a box without a GPU: `nvidia-smi` is a stand-in (support.gpu_standin)."""

from __future__ import annotations

import pytest

from support import gpu_standin


@pytest.fixture
def smi(tmp_path, monkeypatch):
    """The stand-in nvidia-smi first on PATH, no *_VISIBLE_DEVICES, GPU locks of the test's own."""
    gpu_standin.install(tmp_path, monkeypatch)
