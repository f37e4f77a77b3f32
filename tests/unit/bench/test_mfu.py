"""benchmarks/mfu.py: torchtitan's FLOPs per token, MFU, reading a run, the docs section (its
report: test_mfu_report.py).

The expected numbers are worked out by hand here, from the architecture, not by the module."""

from __future__ import annotations

import json
import sys

import pytest

from support.paths import ROOT
from support.run_records import trainer_output

sys.path.insert(0, str(ROOT / "benchmarks"))
import mfu  # noqa: E402


def _config(tmp_path, **kw):
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(
        "llama",
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
        max_position_embeddings=128,
        **kw,
    )
    cfg.save_pretrained(tmp_path)
    return tmp_path


def test_1b_llama_flops_per_token_equal_torchtitans_formula_by_hand(llama_1b):
    h, inter, layers, heads, kv, vocab, t = 2048, 5632, 22, 32, 4, 32000, 2048
    head_dim = h // heads
    per_layer = (
        h * h
        + 2 * h * kv * head_dim
        + h * h  # q, k, v, o
        + 3 * h * inter
        + 2 * h
    )  # gate, up, down; two RMSNorms
    embedding = vocab * h
    non_embedding = layers * per_layer + h + vocab * h  # final norm, untied lm_head
    assert non_embedding == 1_034_512_384 and non_embedding + embedding == 1_100_048_384

    n = mfu.count_params(llama_1b)
    assert n == {"params": 1_100_048_384, "embedding": embedding, "non_embedding": non_embedding}
    config = json.loads((llama_1b / "config.json").read_text())
    assert mfu.attention_dims(config) == (layers, heads, head_dim)
    dense, attention, total = mfu.flops_per_token(n["non_embedding"], layers, heads, head_dim, t)
    assert dense == 6 * 1_034_512_384 == 6_207_074_304
    assert attention == 12 * 22 * 32 * 64 * 2048 == 1_107_296_256
    assert total == 7_314_370_560


def test_untied_output_layer_counts_and_a_tied_one_does_not(tmp_path):
    h, inter, layers, kv_dim, vocab = 64, 96, 3, 2 * 16, 100
    body = layers * (2 * h * h + 2 * h * kv_dim + 3 * h * inter + 2 * h) + h
    untied = mfu.count_params(_config(tmp_path / "untied", tie_word_embeddings=False))
    assert untied == {
        "params": body + 2 * vocab * h,
        "embedding": vocab * h,
        "non_embedding": body + vocab * h,
    }
    tied = mfu.count_params(_config(tmp_path / "tied", tie_word_embeddings=True))
    assert tied == {"params": body + vocab * h, "embedding": vocab * h, "non_embedding": body}


def test_mfu_is_flops_times_tokens_per_device_over_peak():
    assert mfu.mfu(7_314_370_560, 50_000, 989e12) == pytest.approx(0.369786, rel=1e-5)
    assert mfu.mfu(1e9, 1e3, 1e12) == pytest.approx(1e-0)
    with pytest.raises(ValueError):
        mfu.mfu(1.0, 1.0, 0)


def test_compute_reads_the_trainers_tokens_per_s_and_a_steady_window(tmp_path, llama_1b):
    run = trainer_output(tmp_path / "run", ranks=2, batch=4, seq=512)
    r = mfu.compute(llama_1b, run, peak_tflops=989, skip=5)
    assert r["world_size"] == 2 and r["seq_len"] == 512 and r["seq_len_measured"] == 512
    per_token = 6 * 1_034_512_384 + 12 * 22 * 32 * 64 * 512
    assert r["flops_per_token"] == per_token
    assert r["tokens_per_s"] == 12345.0 and r["tokens_per_s_per_device"] == 12345.0 / 2
    assert r["mfu"] == pytest.approx(per_token * 12345.0 / 2 / 989e12)
    s = r["steady"]  # steps 6-10: 2 ranks x 4 x 512 tokens in 0.25 s each
    assert s["steps"] == 5 and s["tokens_per_s"] == pytest.approx(2 * 4 * 512 / 0.25)
    assert s["mfu"] == pytest.approx(per_token * 4 * 512 / 0.25 / 989e12)
    assert s["step_s_median"] == 0.25 and r["max_memory_allocated_bytes"] == 10 * 2**30
    # padding shows in the measured length; a given length is used as given
    padded = mfu.compute(
        llama_1b, trainer_output(tmp_path / "p", ranks=1, pad=8), peak_tflops=989, skip=5
    )
    assert padded["seq_len_measured"] == 510 and padded["seq_len"] == 510
    assert (
        mfu.compute(llama_1b, run, seq_len=1024, peak_tflops=989, skip=5)["seq_len_source"]
        == "given"
    )


def test_docs_section_is_appended_once_then_replaced_in_place(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nintro\n")
    first = f"{mfu.BEGIN}\n## GPU check\nold numbers\n{mfu.END}\n"
    mfu.update_docs(doc, first)
    assert doc.read_text() == "# Benchmarks\n\nintro\n\n" + first
    doc.write_text(doc.read_text() + "\n## Later section\nkept\n")
    mfu.update_docs(doc, first.replace("old", "new"))
    text = doc.read_text()
    assert text.count(mfu.BEGIN) == 1 and "new numbers" in text and "old numbers" not in text
    assert text.startswith("# Benchmarks\n\nintro\n") and text.endswith("## Later section\nkept\n")
