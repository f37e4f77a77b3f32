"""A tokenizer as fms-hf-tuning 3.2.2 has it after loading: which class its transformers (4.55,
``AutoTokenizer.from_pretrained(path, use_fast=True, legacy=True)``) loads, the special tokens
it starts from, and the same token ids from this environment's transformers (5.x).

The class is read from the tokenizer's files as 4.55's AutoTokenizer picks it
(tokenizer_config.json's tokenizer_class, else config.json's, else the model type), never from
the class 5.x loads: 5.x rebuilds the Llama and GPT-NeoX classes' pipelines from the vocabulary,
and they tokenize differently (TinyLlama's tokenizer: leading spaces, a ``</s>`` typed in a
text; 5.x's GPT-NeoX class also gives a pad token, ``<|padding|>``, which 4.55's does not).
4.55's fast classes use tokenizer.json as it is, plus a BOS/EOS as add_bos_token and
add_eos_token say, and its Llama class pads on the left (its fms batches are left-padded): so
does ``load`` here, for those classes.
"""

from __future__ import annotations

import json
from pathlib import Path

NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")
# The classes fms 3.2.2's get_special_tokens_dict checks (LlamaTokenizer(Fast); GPT2Tokenizer,
# GPTNeoXTokenizerFast) as 4.55 loads them with use_fast: a name, or "<name>Fast" where it exists
BY_NAME = {"LlamaTokenizer": "llama", "GPTNeoXTokenizer": "neox"}  # GPT2Tokenizer: its Fast
# The model types whose 4.55 AutoTokenizer class is one of those, when no file names a
# tokenizer_class (4.55 models/auto/tokenization_auto.py TOKENIZER_MAPPING_NAMES).
BY_TYPE = {
    **dict.fromkeys(
        "arcee aria chameleon colpali deepseek_v2 deepseek_v3 deepseek_vl deepseek_vl_hybrid"
        " diffllama ernie4_5 ernie4_5_moe idefics idefics2 idefics3 jamba janus jetmoe llama"
        " llama4 llama4_text llava llava_next llava_next_video llava_onevision mistral mixtral"
        " mllama paligemma persimmon phi3 phimoe video_llava vipllava voxtral zamba"
        " zamba2".split(),
        "llama",
    ),
    **dict.fromkeys(
        "falcon_mamba gpt_neox mamba mamba2 mpt olmo olmo2 olmoe rwkv stablelm xlstm".split(),
        "neox",
    ),
    # no fast class mapped: 4.55 loads the slow GPT2Tokenizer
    **dict.fromkeys("granite granitemoe granitemoehybrid granitemoeshared".split(), "gpt2"),
}
# What those classes give a tokenizer whose files name no bos/eos/unk (their __init__
# defaults, added to the vocabulary at load in this order): fms starts from these.
LOADED = {
    "llama": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "neox": dict.fromkeys(("bos_token", "eos_token", "unk_token"), "<|endoftext|>"),
    "gpt2": dict.fromkeys(("bos_token", "eos_token", "unk_token"), "<|endoftext|>"),
}
# add_bos_token, add_eos_token, padding_side where tokenizer_config.json does not say (their
# __init__ defaults and class attributes: 4.55's LlamaTokenizerFast pads on the left)
ADDS = {"llama": (True, False, "left"), "neox": (False, False, "right")}


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def fms_class(tokenizer_path: str | Path) -> str | None:
    """ "llama" (LlamaTokenizerFast), "neox" (GPTNeoXTokenizerFast), "gpt2" (the slow
    GPT2Tokenizer) or None (another class): what fms's transformers loads from this directory."""
    path = Path(tokenizer_path)
    config = _json(path / "config.json")
    name = _json(path / "tokenizer_config.json").get("tokenizer_class")
    name = name or config.get("tokenizer_class")
    if name:
        return BY_NAME.get(name.removesuffix("Fast"))
    return BY_TYPE.get(config.get("model_type"))


def as_fms_loads(tokenizer_path: str | Path) -> dict:
    """bos/eos/unk/pad as the files give them to 4.55: special_tokens_map.json over
    tokenizer_config.json; None where neither names one (before the class's defaults)."""
    path = Path(tokenizer_path)
    config, given = _json(path / "tokenizer_config.json"), _json(path / "special_tokens_map.json")
    values = {n: given[n] if n in given else config.get(n) for n in NAMES}
    return {n: v.get("content") if isinstance(v, dict) else v for n, v in values.items()}


def load(tokenizer_path: str | Path):
    """The tokenizer, giving the token ids fms's loads give."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(tokenizer_path)
    kind = fms_class(path) if path.is_dir() else None
    if kind in ADDS and (path / "tokenizer.json").is_file():
        config = _json(path / "tokenizer_config.json")
        bos, eos, side = ADDS[kind]
        return PreTrainedTokenizerFast.from_pretrained(
            path,
            add_bos_token=config.get("add_bos_token", bos),
            add_eos_token=config.get("add_eos_token", eos),
            padding_side=config.get("padding_side", side),
        )
    return AutoTokenizer.from_pretrained(tokenizer_path)
