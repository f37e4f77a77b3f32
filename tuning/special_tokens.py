"""The tokenizer and the embedding rows as fms-hf-tuning 3.2.2 sets them up before training
(its tuning/data/tokenizer_utils.py: setup_tokenizer, get_special_tokens_dict and
tokenizer_and_embedding_resize), so a model trains on the same token ids here as there.

- ``chat_template`` from the job replaces the tokenizer's own.
- A tokenizer of the classes below whose files name no bos, eos or unk has its class's
  defaults for them, as transformers 4.55 loads it (Llama ``<s> </s> <unk>``, GPT-2/NeoX
  ``<|endoftext|>``), added first.
- Only when no separate ``tokenizer_name_or_path`` is given: a tokenizer of fms's Llama
  classes gets ``<s> </s> <unk> <pad>`` as bos, eos, unk and pad, one of its GPT-2/NeoX classes
  ``<pad>``; then a missing pad becomes ``<PAD>``, a missing eos ``</s>``, bos ``<s>``, unk
  ``<unk>``; a pad equal to eos becomes ``<PAD>`` (or, if eos is ``<PAD>``, eos becomes ``</s>``).
  Without a pad token AND with a separate tokenizer, fms fails at its first batch (nothing can
  pad); refused here before training, naming the fix.
- The job's ``add_special_tokens`` are added as additional special tokens.
- The embeddings are resized to the tokenizer's length rounded up to
  ``embedding_size_multiple_of``, and every row that resize adds, and every row of a token added
  now, is set to the mean of the rows before them (input and output embeddings, tied or not).
  fms sets the rows of the tokens it adds (and the rounding's) to that mean; rows a tokenizer
  already had past the model's (added tokens the checkpoint never had) it leaves to transformers'
  mean_resizing, which is that mean plus noise scaled by 1e-9: here they are the mean exactly,
  the same on every rank.

Which class fms's transformers (4.55) loads is read from the tokenizer's files, as its
AutoTokenizer decides it (tokenizer_config.json's tokenizer_class, else config.json's, else the
model type), never from the class this environment's transformers (5.x) loads, which differs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tuning.config import ConfigError

# fms 3.2.2 tuning/config/configs.py DEFAULT_PAD_TOKEN, DEFAULT_EOS_TOKEN, ...
DEFAULTS = {"pad_token": "<PAD>", "eos_token": "</s>", "bos_token": "<s>", "unk_token": "<unk>"}
FIXED = {
    "llama": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
    "gpt2": {"pad_token": "<pad>"},
}
# What those classes give a tokenizer whose files name no bos/eos/unk, as 4.55 loads it (their
# __init__ defaults, added to the vocabulary at load in this order): fms starts from these.
LOADED = {
    "llama": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "gpt2": dict.fromkeys(("bos_token", "eos_token", "unk_token"), "<|endoftext|>"),
}
# The model types whose tokenizer transformers 4.55's AutoTokenizer (use_fast=True) loads as one
# of the classes fms checks (LlamaTokenizerFast; GPTNeoXTokenizerFast; the slow GPT2Tokenizer,
# where no fast class is mapped), from its models/auto/tokenization_auto.py, when neither
# tokenizer_config.json nor config.json names a tokenizer_class.
LLAMA_TYPES = frozenset(
    "arcee aria chameleon colpali deepseek_v2 deepseek_v3 deepseek_vl deepseek_vl_hybrid diffllama"
    " ernie4_5 ernie4_5_moe idefics idefics2 idefics3 jamba janus jetmoe llama llama4 llama4_text"
    " llava llava_next llava_next_video llava_onevision mistral mixtral mllama paligemma persimmon"
    " phi3 phimoe video_llava vipllava voxtral zamba zamba2".split()
)
GPT2_TYPES = frozenset(
    "falcon_mamba gpt_neox mamba mamba2 mpt olmo olmo2 olmoe rwkv stablelm xlstm"  # NeoX fast
    " granite granitemoe granitemoehybrid granitemoeshared".split()  # slow GPT2Tokenizer
)
NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def fms_family(tokenizer_path: str | Path) -> str | None:
    """ "llama", "gpt2" or None: the fixed special tokens fms 3.2.2 gives the tokenizer it
    loads from this directory (with transformers 4.55, use_fast=True)."""
    path = Path(tokenizer_path)
    name = _json(path / "tokenizer_config.json").get("tokenizer_class")
    config = _json(path / "config.json")
    name = name or config.get("tokenizer_class")
    if name:  # use_fast: "<name>Fast" where it exists; only these are of fms's classes then
        return {"LlamaTokenizer": "llama", "GPTNeoXTokenizer": "gpt2"}.get(
            name.removesuffix("Fast")
        )
    kind = config.get("model_type")
    return "llama" if kind in LLAMA_TYPES else "gpt2" if kind in GPT2_TYPES else None


def as_fms_loads(tokenizer_path: str | Path) -> dict:
    """bos/eos/unk/pad as the tokenizer's files give them to fms's transformers (4.55):
    special_tokens_map.json over tokenizer_config.json; None where neither names one. (This
    environment's transformers may give the same files other values: its GPT-NeoX class, for
    one, defaults pad to <|padding|>, where 4.55's has none.)"""
    path = Path(tokenizer_path)
    config, given = _json(path / "tokenizer_config.json"), _json(path / "special_tokens_map.json")
    values = {n: given[n] if n in given else config.get(n) for n in NAMES}
    return {n: v.get("content") if isinstance(v, dict) else v for n, v in values.items()}


def tokens_to_add(current: dict, family: str | None, separate_tokenizer: bool,
                  extra: list[str] | None = None) -> dict:  # fmt: skip
    """The special tokens fms adds to a tokenizer whose bos/eos/unk/pad are `current` (None:
    missing), in fms's order: its class's defaults where it loads them, get_special_tokens_dict's
    cases, then the job's add_special_tokens."""
    add = {n: v for n, v in LOADED.get(family, {}).items() if current.get(n) is None}
    current = {**current, **add}
    if not separate_tokenizer:
        add.update(FIXED.get(family, {}))
        for name in ("pad_token", "eos_token", "bos_token", "unk_token"):
            if current.get(name) is None:
                add[name] = DEFAULTS[name]
        pad, eos = current.get("pad_token"), current.get("eos_token")
        if pad is not None and pad == eos:
            if eos != DEFAULTS["pad_token"]:
                add["pad_token"] = DEFAULTS["pad_token"]
            else:
                add["eos_token"] = DEFAULTS["eos_token"]
    if extra:
        add["additional_special_tokens"] = list(extra)
    return add


def check_pad(tokenizer, tokenizer_path: str) -> None:
    """fms pads every batch with the tokenizer's pad token and adds none to a separate
    tokenizer: without one it fails at its first batch. Refused before training."""
    if tokenizer.pad_token is None:
        raise ConfigError(
            f"tokenizer_name_or_path {tokenizer_path} has no pad token, and fms-hf-tuning adds"
            " none to a tokenizer given separately (it fails at its first batch: 'Asking to pad"
            " but the tokenizer does not have a padding token'): save the tokenizer with a pad"
            " token (tokenizer.add_special_tokens({'pad_token': '<PAD>'})), or leave"
            " tokenizer_name_or_path unset so the model's own tokenizer gets <PAD> added"
        )


def _set_mean_rows(model, start: int, size: int) -> None:
    """Rows start..size-1 of the input and output embeddings := the mean of rows 0..start-1."""
    import torch

    layers = [model.get_input_embeddings(), model.get_output_embeddings()]
    weights = {id(m.weight): m.weight for m in layers if m is not None}  # tied: one tensor
    with torch.no_grad():
        for weight in weights.values():
            weight[start:size] = weight[:start].mean(dim=0, keepdim=True)


def set_up(tokenizer, model, cfg) -> dict:
    """fms's setup_tokenizer on `tokenizer` and `model`; returns what changed (for the log and
    train_summary.json's "tokenizer")."""
    if cfg.chat_template:
        tokenizer.chat_template = cfg.chat_template
    separate = bool(cfg.tokenizer_name_or_path)
    family = fms_family(cfg.tokenizer_path)
    before = {name: getattr(tokenizer, name) for name in NAMES}
    loaded = as_fms_loads(cfg.tokenizer_path)
    add = tokens_to_add(loaded, family, separate, cfg.add_special_tokens)
    for name in NAMES:  # first, the tokens as fms's transformers has them after loading
        if name not in add and before[name] != loaded[name]:
            if loaded[name] is None:
                setattr(tokenizer, name, None)
            else:
                add = {name: loaded[name], **add}
    length = len(tokenizer)
    added = tokenizer.add_special_tokens(add, replace_extra_special_tokens=False) if add else 0
    if separate:
        check_pad(tokenizer, cfg.tokenizer_name_or_path)
    multiple = cfg.embedding_size_multiple_of
    size = multiple * math.ceil(len(tokenizer) / multiple)
    fms_new = added + size - len(tokenizer)  # fms's num_new_tokens: its rows set to the mean
    rows = model.get_input_embeddings().weight.shape[0]
    if size != rows:
        model.resize_token_embeddings(size, mean_resizing=False)
    start = min(rows, size - fms_new) if fms_new > 0 else rows
    if start < size:
        _set_mean_rows(model, start, size)
    changed = {n: getattr(tokenizer, n) for n in NAMES if getattr(tokenizer, n) != before[n]}
    return {
        "fms_class": family,
        "separate_tokenizer": separate,
        "set": changed,
        "ids": {n: tokenizer.convert_tokens_to_ids(v) for n, v in changed.items()},
        "added_tokens": added,
        "additional_special_tokens": list(cfg.add_special_tokens or []),
        "tokenizer_length": [length, len(tokenizer)],
        "embedding_rows": [rows, size],
        "embedding_size_multiple_of": multiple,
        "mean_rows": [start, size] if start < size else None,
        "chat_template_from_job": bool(cfg.chat_template),
    }


def describe(record: dict) -> str | None:
    """One line for the log: what set_up changed (None: nothing)."""
    parts = [f"{n} {v!r} (id {record['ids'][n]})" for n, v in record["set"].items()]
    if record["additional_special_tokens"]:
        parts.append(f"additional special tokens {record['additional_special_tokens']}")
    rows, size = record["embedding_rows"]
    if not parts and rows == size and not record["mean_rows"]:
        return None
    what = "set " + ", ".join(parts) + "; " if parts else ""
    line = f"tokenizer as fms-hf-tuning sets it up: {what}{record['tokenizer_length'][1]} tokens"
    line += f", embedding rows {rows} -> {size}"
    if record["embedding_size_multiple_of"] != 1:
        line += f" (a multiple of {record['embedding_size_multiple_of']})"
    if record["mean_rows"]:
        a, b = record["mean_rows"]
        line += f"; rows {a}..{b - 1} set to the mean of rows 0..{a - 1}"
    return line
