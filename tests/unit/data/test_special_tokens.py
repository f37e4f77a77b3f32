"""The tokenizer and embeddings set up as fms-hf-tuning 3.2.2 sets them up
(tuning/container/sft/special_tokens.py): its special-token cases, the resize to a multiple, new
rows at the mean; the EOS of a tokenizer without a pad token stays in the labels (added special
tokens past the model's rows, trained: test_special_tokens_trained.py; the set-up against fms's own,
in its image: engine/trainers/test_fms_tokens.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from support.tokenizer_models import CHAT_TOKENS, job_config, variant
from tuning.container.sft.chat import IGNORE_INDEX
from tuning.container.sft.config import ConfigError
from tuning.container.sft.data import load_examples, tokenize_example
from tuning.container.sft.fms_tokenizer import load
from tuning.container.sft.special_tokens import set_up, tokens_to_add

LLAMA = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}


@pytest.mark.parametrize(
    "current, family, separate, extra, expected",
    [
        (LLAMA, None, False, None, {}),
        ({**LLAMA, "pad_token": None}, None, False, None, {"pad_token": "<PAD>"}),
        (
            {"bos_token": "<|b|>", "eos_token": "<|e|>"},
            None,
            False,
            None,
            {"pad_token": "<PAD>", "unk_token": "<unk>"},
        ),
        (
            {},
            None,
            False,
            None,
            {"pad_token": "<PAD>", "eos_token": "</s>", "bos_token": "<s>", "unk_token": "<unk>"},
        ),
        ({**LLAMA, "pad_token": "</s>"}, None, False, None, {"pad_token": "<PAD>"}),
        (
            {**LLAMA, "pad_token": "<PAD>", "eos_token": "<PAD>"},
            None,
            False,
            None,
            {"eos_token": "</s>"},
        ),
        # Llama classes: the four fixed, then <PAD> over <pad> when the tokenizer has no pad
        ({**LLAMA, "pad_token": "<unk>"}, "llama", False, None, LLAMA),
        ({**LLAMA, "pad_token": None}, "llama", False, None, {**LLAMA, "pad_token": "<PAD>"}),
        ({**LLAMA, "pad_token": "</s>"}, "gpt2", False, None, {"pad_token": "<PAD>"}),
        (LLAMA, "gpt2", False, None, {"pad_token": "<pad>"}),
        (LLAMA, "neox", False, None, {"pad_token": "<pad>"}),
        # 4.55 loads the class's own bos/eos/unk where the files name none: those come first
        (
            {"bos_token": "<|b|>", "eos_token": "<|e|>"},
            "llama",
            False,
            None,
            {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<PAD>"},
        ),
        (
            {"pad_token": "<pad>"},
            "gpt2",
            False,
            None,
            dict.fromkeys(("bos_token", "eos_token", "unk_token", "pad_token"), "<|endoftext|>")
            | {"pad_token": "<pad>"},
        ),
        # a separate tokenizer: nothing but the job's own tokens (and the class's at load)
        ({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, "llama", True, None, {}),
        ({"eos_token": "</s>"}, "llama", True, None, {"bos_token": "<s>", "unk_token": "<unk>"}),
        ({}, None, True, ["<|a|>"], {"additional_special_tokens": ["<|a|>"]}),
        (LLAMA, None, False, ["<|a|>", "<|b|>"], {"additional_special_tokens": ["<|a|>", "<|b|>"]}),
    ],
)
def test_special_tokens_as_fms_adds_them(current, family, separate, extra, expected):
    assert tokens_to_add(current, family, separate, extra) == expected
    # fms adds them in this order (the ids follow it): its fixed ones, then pad, eos, bos, unk
    assert list(tokens_to_add(current, family, separate, extra)) == list(expected)


def _load(model: Path):
    from transformers import AutoModelForCausalLM

    return load(model), AutoModelForCausalLM.from_pretrained(model)


def _weights(model) -> list:
    return [
        m.weight.detach().clone()
        for m in (model.get_input_embeddings(), model.get_output_embeddings())
    ]


def _assert_mean_rows(model, start: int, size: int, before: list) -> None:
    for weight, old in zip(_weights(model), before, strict=True):
        assert weight.shape[0] == size
        assert torch.equal(weight[: old.shape[0]][:start], old[:start])  # old rows kept
        expected = old[:start].mean(dim=0)
        for row in range(start, size):
            assert torch.equal(weight[row], expected), f"row {row} is not the mean"


def test_no_pad_token_gets_pad_and_unk_and_mean_rows(models):
    tokenizer, model = _load(models["no_pad"])
    n = len(tokenizer)
    before = _weights(model)
    record = set_up(tokenizer, model, job_config(models["no_pad"]))
    assert tokenizer.pad_token == "<PAD>" and tokenizer.unk_token == "<unk>"
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id) == (n, n + 1)
    assert (
        tokenizer.eos_token == "<|end_of_text|>"
        and tokenizer.pad_token_id != tokenizer.eos_token_id
    )
    assert record["embedding_rows"] == [n, n + 2] and record["mean_rows"] == [n, n + 2]
    assert record["set"] == {"pad_token": "<PAD>", "unk_token": "<unk>"}
    _assert_mean_rows(model, n, n + 2, before)


def test_tied_embeddings_get_the_mean_once(tmp_path, models):
    from transformers import AutoModelForCausalLM

    from tuning.container.tiny_model import build_config

    tokenizer = load(models["no_pad"])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(build_config("gpt2", tokenizer))
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    n, old = len(tokenizer), model.get_input_embeddings().weight.detach().clone()
    set_up(tokenizer, model, job_config(models["no_pad"], embedding_size_multiple_of=8))
    size = 8 * -(-(n + 2) // 8)
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    weight = model.get_input_embeddings().weight.detach()
    assert weight.shape[0] == size and torch.equal(weight[:n], old)
    assert all(torch.equal(weight[r], old.mean(dim=0)) for r in range(n, size))


def test_added_tokens_past_the_rows_and_any_multiple(models):
    """Defect: a tokenizer with 4 more ids than the model has rows ended in IndexError."""
    tokenizer, model = _load(models["added"])
    rows = model.get_input_embeddings().weight.shape[0]
    assert len(tokenizer) == rows + len(CHAT_TOKENS)
    before = _weights(model)
    record = set_up(tokenizer, model, job_config(models["added"], embedding_size_multiple_of=64))
    size = 64 * -(-len(tokenizer) // 64)
    assert record["embedding_rows"] == [rows, size] and record["added_tokens"] == 0
    assert model.config.vocab_size == size
    _assert_mean_rows(model, rows, size, before)
    ids = torch.tensor([tokenizer.convert_tokens_to_ids(CHAT_TOKENS)])
    assert model(input_ids=ids).logits.shape[-1] == size  # every added id has a row


def test_job_special_tokens_and_chat_template(models):
    tokenizer, model = _load(models["added"])
    cfg = job_config(
        models["added"], add_special_tokens=["<|a,b|>", "<|c|>"], chat_template="{{x}}"
    )
    record = set_up(tokenizer, model, cfg)
    assert tokenizer.convert_tokens_to_ids("<|a,b|>") == len(tokenizer) - 2  # one token, no split
    assert tokenizer("x<|c|>")["input_ids"][-1] == len(tokenizer) - 1
    assert tokenizer.chat_template == "{{x}}" and record["added_tokens"] == 2


def test_separate_tokenizer_gets_nothing_and_without_pad_is_refused(models, tmp_path):
    tokenizer, model = _load(models["no_pad"])
    cfg = job_config(models["added"], tokenizer_name_or_path=str(models["no_pad"]))
    with pytest.raises(ConfigError, match=r"no pad token.*leave tokenizer_name_or_path unset"):
        set_up(tokenizer, model, cfg)
    tokenizer, model = _load(models["added"])
    cfg = job_config(models["added"], tokenizer_name_or_path=str(models["added"]))
    assert set_up(tokenizer, model, cfg)["set"] == {}
    pad_eos = variant(models["added"], tmp_path / "pad_eos", pad_token="</s>")
    tokenizer, model = _load(pad_eos)
    with pytest.warns(UserWarning, match="its pad token is its EOS, so the EOS is masked"):
        assert (
            set_up(tokenizer, model, job_config(pad_eos, tokenizer_name_or_path=str(pad_eos)))[
                "set"
            ]
            == {}
        )
    assert tokenizer.pad_token == "</s>"  # fms leaves it so


def test_eos_stays_in_the_labels_without_a_pad_token(models, tmp_path):
    """Defect: pad = eos masked the appended EOS out of the labels with the padding."""
    data = tmp_path / "t.jsonl"
    data.write_text(json.dumps({"text": "### Input: ant cat\n\n## Label: teal red"}) + "\n")
    tokenizer, model = _load(models["no_pad"])
    set_up(tokenizer, model, job_config(models["no_pad"]))
    (example,) = load_examples(data, dataset_text_field="text", response_template="\n\n## Label:")
    row = tokenize_example(example, tokenizer, 64, "\n\n## Label:")
    assert row["input_ids"][-1] == tokenizer.eos_token_id
    assert row["labels"][-1] == tokenizer.eos_token_id  # learned: the model learns to stop
    assert row["labels"][0] == IGNORE_INDEX
