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
- The job's ``add_special_tokens`` are added as additional special tokens. A token the
  tokenizer already has is not re-added (fms's tokenizers 0.21 leaves how it matches text),
  but counts as added when its settings differ from a fresh special token's, as 0.21 counts it:
  Llama 2's and TinyLlama's ``<s> </s> <unk>`` are 3, so fms (and so this trainer) sets the
  last 3 rows of such a vocabulary to the mean even when no row is added.
- The embeddings are resized to the tokenizer's length rounded up to
  ``embedding_size_multiple_of``, and every row that resize adds, and every row of a token added
  now, is set to the mean of the rows before them (input and output embeddings, tied or not).
  fms sets the rows of the tokens it adds (and the rounding's) to that mean; rows a tokenizer
  already had past the model's (added tokens the checkpoint never had) it leaves to transformers'
  mean_resizing, which is that mean plus noise scaled by 1e-9: here they are the mean exactly,
  the same on every rank.

Which class fms's transformers (4.55) loads, and the special tokens it starts from, are read
from the tokenizer's files (tuning/container/sft/fms_tokenizer.py), never from this environment's
(5.x).
"""

from __future__ import annotations

import math
import warnings

from tuning.container.sft.config import ConfigError
from tuning.container.sft.fms_tokenizer import LOADED, NAMES, as_fms_loads, fms_class

# fms 3.2.2 tuning/config/configs.py DEFAULT_PAD_TOKEN, DEFAULT_EOS_TOKEN, ...
DEFAULTS = {"pad_token": "<PAD>", "eos_token": "</s>", "bos_token": "<s>", "unk_token": "<unk>"}
FIXED = {
    "llama": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
    "neox": {"pad_token": "<pad>"},
    "gpt2": {"pad_token": "<pad>"},
}


def tokens_to_add(
    current: dict, family: str | None, separate_tokenizer: bool, extra: list[str] | None = None
) -> dict:
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
    tokenizer: without one it fails at its first batch (refused here before training); with
    the EOS as pad it masks the EOS out of the labels (warned)."""
    if tokenizer.pad_token is None:
        raise ConfigError(
            f"tokenizer_name_or_path {tokenizer_path} has no pad token, and fms-hf-tuning adds"
            " none to a tokenizer given separately (it fails at its first batch: 'Asking to pad"
            " but the tokenizer does not have a padding token'): save the tokenizer with a pad"
            " token (tokenizer.add_special_tokens({'pad_token': '<PAD>'})), or leave"
            " tokenizer_name_or_path unset so the model's own tokenizer gets <PAD> added"
        )
    if tokenizer.pad_token == tokenizer.eos_token:
        warnings.warn(
            f"tokenizer_name_or_path {tokenizer_path}: its pad token is its EOS, so the EOS is"
            " masked out of text records' labels with the padding (as in fms, which changes"
            " nothing in a tokenizer given separately): the model does not learn to stop. Save"
            " the tokenizer with its own pad token, or leave tokenizer_name_or_path unset",
            stacklevel=2,
        )


def _set_mean_rows(model, start: int, size: int) -> None:
    """Rows start..size-1 of the input and output embeddings := the mean of rows 0..start-1."""
    import torch

    layers = [model.get_input_embeddings(), model.get_output_embeddings()]
    weights = {id(m.weight): m.weight for m in layers if m is not None}  # tied: one tensor
    with torch.no_grad():
        for weight in weights.values():
            weight[start:size] = weight[:start].mean(dim=0, keepdim=True)


def _flags(token) -> tuple:
    return token.lstrip, token.rstrip, token.single_word, token.normalized, token.special


def _add(tokenizer, add: dict) -> int:
    """tokenizer.add_special_tokens(add) as fms's tokenizers (0.21) does it; returns its count.
    A token the tokenizer already has as an added token keeps the way it matches text there
    (0.23 re-adds it: TinyLlama's '</s>', normalized, then matches inside 'ok</s>', where fms's
    does not); it counts as added when its settings differ from a special token's, as 0.21
    counts it (fms's num_new_tokens, so which rows are set to the mean)."""
    from tokenizers import AddedToken

    have = {t.content: t for t in tokenizer.added_tokens_decoder.values()}
    fresh, count = {}, 0
    for name, value in add.items():
        if isinstance(value, str) and value in have:
            setattr(tokenizer, name, value)
            count += _flags(have[value]) != _flags(
                AddedToken(value, special=True, normalized=False)
            )
        else:
            fresh[name] = value
    if fresh:
        count += tokenizer.add_special_tokens(fresh, replace_extra_special_tokens=False)
    return count


def set_up(tokenizer, model, cfg) -> dict:
    """fms's setup_tokenizer on `tokenizer` and `model`; returns what changed (for the log and
    train_summary.json's "tokenizer")."""
    if cfg.chat_template:
        tokenizer.chat_template = cfg.chat_template
    separate = bool(cfg.tokenizer_name_or_path)
    family = fms_class(cfg.tokenizer_path)
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
    added = _add(tokenizer, add)
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
        "fms_class": family,  # llama | neox | gpt2 | None
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


def check_token_ids(examples, rows: int) -> None:
    """Pre-tokenized records' ids must each have an embedding row: torch's embedding fails
    with 'IndexError: index out of range in self' (in fms too) where one has none."""
    for example in examples or []:
        ids = example.input_ids
        if ids and (max(ids) >= rows or min(ids) < 0):
            bad = max(ids) if max(ids) >= rows else min(ids)
            raise ConfigError(
                f"{example.where}: token id {bad} has no embedding row (the model has {rows},"
                " ids 0 to rows-1, after the tokenizer set-up): tokenize the records with this"
                " model's tokenizer, or train the model they were tokenized for"
            )


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
