"""A tokenizer as fms-hf-tuning 3.2.2's transformers (4.55) loads it
(tuning/container/sft/fms_tokenizer.py): the class read from the files, the special tokens it starts
from, tokenizer.json as it is for the Llama and GPT-NeoX classes (transformers 5 rebuilds them), the
padding side. (tests/engine/trainers/test_fms_tokens.py compares the ids with fms's own, in its
image.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.tokenizer_models import (
    CHAT_TOKENS,
    job_config,
    portable,
    sentencepiece_llama,
    variant,
)
from tuning.container.sft.chat import IGNORE_INDEX
from tuning.container.sft.collator import Collator
from tuning.container.sft.fms_tokenizer import as_fms_loads, fms_class, load
from tuning.container.sft.special_tokens import set_up


def _files(path: Path, tokenizer_config: dict | None, config: dict | None) -> Path:
    path.mkdir()
    for name, data in (("tokenizer_config.json", tokenizer_config), ("config.json", config)):
        if data is not None:
            (path / name).write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "tokenizer_config, config, family",
    [
        ({"tokenizer_class": "LlamaTokenizer"}, None, "llama"),
        ({"tokenizer_class": "LlamaTokenizerFast"}, {"model_type": "gpt2"}, "llama"),
        ({"tokenizer_class": "GPTNeoXTokenizerFast"}, None, "neox"),
        ({"tokenizer_class": "GPT2Tokenizer"}, None, None),  # 4.55 loads GPT2TokenizerFast
        ({"tokenizer_class": "PreTrainedTokenizerFast"}, {"model_type": "llama"}, None),
        ({}, {"tokenizer_class": "LlamaTokenizer", "model_type": "gpt2"}, "llama"),
        ({}, {"model_type": "mistral"}, "llama"),
        ({}, {"model_type": "gpt_neox"}, "neox"),
        ({}, {"model_type": "granite"}, "gpt2"),  # no fast class mapped: the slow GPT2Tokenizer
        ({}, {"model_type": "gpt2"}, None),
        (None, None, None),
    ],
)
def test_the_class_fms_loads_is_read_from_the_files(tmp_path, tokenizer_config, config, family):
    assert fms_class(_files(tmp_path / "tok", tokenizer_config, config)) == family


def test_portable_tokenizer_loads_the_same_ids(models):
    """The test models' tokenizer_config is written for fms's transformers too; here it still
    loads the added tokens as special tokens with their ids."""
    tokenizer = load(portable(models["added"]))
    assert tokenizer.convert_tokens_to_ids(CHAT_TOKENS) == list(range(352, 356))
    assert tokenizer("a<|user|>b")["input_ids"][1] == 353


def test_special_tokens_are_read_as_fms_loads_them(tmp_path):
    path = _files(
        tmp_path / "tok",
        {
            "eos_token": "</s>",
            "pad_token": "<pad>",
            "bos_token": {"content": "<s>", "special": True},
        },
        None,
    )
    (path / "special_tokens_map.json").write_text(json.dumps({"pad_token": "<|pad|>"}))
    assert as_fms_loads(path) == {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": None,
        "pad_token": "<|pad|>",
    }


def test_neox_and_llama_classes_load_as_fms_loads_them(models, tmp_path):
    """transformers 5 rebuilds these classes (its GPT-NeoX one adds a <|padding|> pad token);
    fms's 4.55 takes tokenizer.json as it is, BOS added as add_bos_token says (Llama: yes)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    neox = variant(models["no_pad"], tmp_path / "neox", tokenizer_class="GPTNeoXTokenizer")
    assert AutoTokenizer.from_pretrained(neox).pad_token == "<|padding|>"  # 5.x's own
    tokenizer = load(neox)
    assert tokenizer.pad_token is None and len(tokenizer) == 350
    set_up(tokenizer, AutoModelForCausalLM.from_pretrained(neox), job_config(neox))
    assert tokenizer.unk_token == "<|endoftext|>" and tokenizer.pad_token == "<PAD>"
    assert (tokenizer.unk_token_id, tokenizer.pad_token_id) == (350, 351)
    llama = variant(models["no_pad"], tmp_path / "llama", tokenizer_class="LlamaTokenizer")
    bos = load(llama).convert_tokens_to_ids("<|begin_of_text|>")
    assert load(llama)("ant cat")["input_ids"][0] == bos  # 4.55's LlamaTokenizerFast adds it
    assert load(models["no_pad"])("ant cat")["input_ids"][0] != bos


def test_a_sentencepiece_llama_tokenizer_is_not_rebuilt(tmp_path):
    """transformers 5 rebuilds a Llama-class tokenizer and tokenizes a tab differently from fms's
    4.55, which uses tokenizer.json as it is (tests/engine/trainers/test_fms_tokens.py: load() gives
    fms's ids on this tokenizer)."""
    from transformers import AutoTokenizer

    path = sentencepiece_llama(tmp_path / "sp")
    text = "  two spaces\tand a tab"
    ours, rebuilt = (
        load(path)(text)["input_ids"],
        AutoTokenizer.from_pretrained(path)(text)["input_ids"],
    )
    assert ours != rebuilt and ours[0] == rebuilt[0] == load(path).bos_token_id


def test_batches_are_padded_on_the_tokenizers_side(models, tmp_path):
    """fms's collators pad through the tokenizer: 4.55's Llama class pads on the left."""
    rows = [
        {"input_ids": [5, 6, 7], "labels": [X := IGNORE_INDEX, 6, 7]},
        {"input_ids": [8], "labels": [8]},
    ]
    left = Collator(0, "left")(rows)
    assert left["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert left["labels"].tolist() == [[X, 6, 7], [X, X, 8]]
    assert left["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert Collator(0)(rows)["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    llama = variant(models["no_pad"], tmp_path / "llama", tokenizer_class="LlamaTokenizer")
    assert load(llama).padding_side == "left" and load(models["no_pad"]).padding_side == "right"
    variant(llama, tmp_path / "right", padding_side="right")
    assert load(tmp_path / "right").padding_side == "right"
