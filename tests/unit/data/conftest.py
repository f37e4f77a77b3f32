"""The data area's fixtures."""

from __future__ import annotations

import pytest

from support.tokenizer_models import build_models


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    """The no_pad and added-tokens tiny models (support.tokenizer_models), once per module."""
    return build_models(tmp_path_factory)
