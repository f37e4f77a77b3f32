"""Fixtures of the no-engine tests that more than one area uses."""

from __future__ import annotations

import pytest

from support.desync_ranks import Ranks


@pytest.fixture
def ranks(tmp_path):
    """ranks(n, **env) starts n gloo ranks of the desync entry (support.desync_ranks.Ranks);
    every one started is stopped after the test."""
    made = []

    def start(n: int, **env) -> Ranks:
        made.append(Ranks(tmp_path, n, env))
        return made[-1]

    yield start
    for r in made:
        r.stop()
