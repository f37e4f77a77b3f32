"""JSON Lines training data: three shapes, validated before training, tokenized with loss masks.

Shapes (chosen from the config):
  (a) ``dataset_text_field`` [+ ``response_template``]: loss only on tokens after the template
      (on every token when no template is given);
  (b) ``input``/``output`` fields (the default): the input is masked;
  (c) ``data_formatter_template`` over the record's fields, e.g.
      ``"### Input: {{input}} \\n\\n## Label: {{output}}"``, with ``response_template``.
Masked prompt tokens and padding carry label -100, so they never count in the loss.
Every record carries an ``index`` (its line's position in the dataset); the collator turns it into
``sample_index`` so the trainer can log which samples a rank used, and never feeds it to the model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

IGNORE_INDEX = -100
TEMPLATE_FIELD = re.compile(r"\{\{\s*([^{}\s]+)\s*\}\}")


class DataError(ValueError):
    """A data file the trainer refuses before training; the message names the file and line."""


@dataclass(frozen=True)
class Example:
    """One validated record: either prompt/response pieces or a text with the response's start."""

    index: int
    line: int
    prompt: str | None = None  # shape (b)
    response: str | None = None  # shape (b)
    text: str | None = None  # shapes (a) and (c)
    response_start: int = 0  # character offset in text where the loss starts (a, c)


def read_jsonl(path: str | Path) -> list[tuple[int, dict]]:
    """Parse a JSON Lines file into (line number, record) pairs; refuse anything malformed."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read data file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8 text ({exc.reason})") from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(
                f"{path}:{number}: malformed JSON: {exc.msg} (column {exc.colno})"
            ) from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        records.append((number, record))
    if not records:
        raise DataError(f"{path}: empty data file (no JSON records)")
    return records


def _field(path, number, record, name) -> str:
    if name not in record:
        raise DataError(f"{path}:{number}: missing field {name!r} (record has {sorted(record)})")
    value = record[name]
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise DataError(
            f"{path}:{number}: field {name!r} must be a string, not {type(value).__name__}"
        )
    return str(value)


def _split_on_template(path, number, text: str, response_template: str | None) -> int:
    if not response_template:
        return 0
    at = text.find(response_template)
    if at < 0:
        raise DataError(
            f"{path}:{number}: response_template {response_template!r} not found in the text"
        )
    return at + len(response_template)


def load_examples(
    path: str | Path,
    dataset_text_field: str | None = None,
    response_template: str | None = None,
    data_formatter_template: str | None = None,
) -> list[Example]:
    """Read and validate a whole file into Examples. Pure Python: safe to call before rendezvous."""
    examples = []
    for index, (number, record) in enumerate(read_jsonl(path)):
        if data_formatter_template:
            text = TEMPLATE_FIELD.sub(
                lambda m, n=number, r=record: _field(path, n, r, m.group(1)),
                data_formatter_template,
            )
            start = _split_on_template(path, number, text, response_template)
            examples.append(Example(index, number, text=text, response_start=start))
        elif dataset_text_field:
            text = _field(path, number, record, dataset_text_field)
            start = _split_on_template(path, number, text, response_template)
            examples.append(Example(index, number, text=text, response_start=start))
        else:
            prompt = _field(path, number, record, "input")
            response = _field(path, number, record, "output")
            examples.append(Example(index, number, prompt=prompt, response=response))
    return examples


def tokenize_example(example: Example, tokenizer, max_seq_length: int) -> dict:
    """Token ids and labels (-100 on the prompt) for one Example, EOS-terminated, truncated."""
    eos = tokenizer.eos_token_id
    if example.text is None:
        prompt_ids = tokenizer(example.prompt, add_special_tokens=True)["input_ids"]
        response_ids = tokenizer(example.response, add_special_tokens=False)["input_ids"]
        if eos is not None:
            response_ids = response_ids + [eos]
        input_ids = prompt_ids + response_ids
        labels = [IGNORE_INDEX] * len(prompt_ids) + list(response_ids)
    else:
        enc = tokenizer(example.text, add_special_tokens=True, return_offsets_mapping=True)
        input_ids = list(enc["input_ids"])
        labels = []
        for tok, (start, end) in zip(input_ids, enc["offset_mapping"], strict=True):
            special = start == end == 0 and tok in tokenizer.all_special_ids
            # a token is a response token only if it starts at or after the template's end
            labels.append(tok if not special and start >= example.response_start else IGNORE_INDEX)
        if eos is not None and (not input_ids or input_ids[-1] != eos):
            input_ids.append(eos)
            labels.append(eos)
    input_ids = input_ids[:max_seq_length]
    labels = labels[:max_seq_length]
    return {"input_ids": input_ids, "labels": labels, "index": example.index}


class TokenizedDataset:
    """A map-style dataset of tokenized records (a list; no `datasets` dependency)."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]


def tokenize_examples(
    examples: list[Example], tokenizer, max_seq_length: int, path=""
) -> TokenizedDataset:
    rows = [tokenize_example(e, tokenizer, max_seq_length) for e in examples]
    if not any(any(x != IGNORE_INDEX for x in r["labels"][1:]) for r in rows):
        raise DataError(
            f"{path}: no record has a response token within max_seq_length={max_seq_length};"
            " nothing to learn"
        )
    return TokenizedDataset(rows)


class Collator:
    """Right-pads a batch: padding gets attention 0 and label -100; `index` -> `sample_index`."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, features: list[dict]) -> dict:
        import torch

        width = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(features), width), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(features), width), dtype=torch.long)
        for row, f in enumerate(features):
            n = len(f["input_ids"])
            ids[row, :n] = torch.tensor(f["input_ids"], dtype=torch.long)
            labels[row, :n] = torch.tensor(f["labels"], dtype=torch.long)
            mask[row, :n] = 1
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        if "index" in features[0]:
            batch["sample_index"] = torch.tensor([f["index"] for f in features], dtype=torch.long)
        return batch
