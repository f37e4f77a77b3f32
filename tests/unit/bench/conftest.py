"""The bench area's fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def llama_1b(tmp_path_factory):
    """A 1B Llama's config (and tokenizer) only: its FLOPs are counted on the meta device."""
    from tuning.container.demo_data import corpus
    from tuning.container.tiny_model import LLAMA_1B, build_config_1b, build_tokenizer

    tok = build_tokenizer(corpus(), model_max_length=LLAMA_1B["max_position_embeddings"])
    out = tmp_path_factory.mktemp("llama1b")
    build_config_1b(tok).save_pretrained(out)  # the config only: counted on the meta device
    return out
