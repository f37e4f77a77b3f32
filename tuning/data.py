"""Training data: three shapes, validated before training, tokenized and masked as fms-hf-tuning
3.2.2 does it (tests/test_fms_parity.py compares the two token for token).

Files: JSON Lines, or a JSON array of objects (fms's ``twitter_complaints_small.json``), any suffix.
Shapes (chosen from the config, as fms chooses them):
  (a) ``dataset_text_field`` + ``response_template``: the field's text plus the EOS token;
  (b) ``input``/``output`` fields (the default): ``input [+ " "] + output + EOS``, input masked;
  (c) ``data_formatter_template`` over the record's fields, with ``response_template``:
      ``{{input}}``, ``{{element['Tweet text']}}`` (fms's Jinja form) and ``{{Tweet text}}`` (a
      field name with spaces, fms's older form) are filled; other Jinja needs ``jinja2``.
Masking, as fms: (b) labels are -100 over as many tokens as the input alone tokenizes to;
(a, c) like trl's DataCollatorForCompletionOnlyLM with fms's template ids
(``encode(response_template)[2:]``): everything up to the end of the template's LAST occurrence
in the token ids is -100, and a record where it is not found (e.g. truncated away) is all -100.
A template absent from a record's text altogether is refused here, with its file and line.
Pad-token ids in (a, c) labels are -100 (as DataCollatorForLanguageModeling does).
Every record carries an ``index`` (its position in the dataset); the collator turns it into
``sample_index`` so the trainer can log which samples a rank used, and never feeds it to the model.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from tuning.files import read_or_refuse
from tuning.template import SPECIAL_NAMES, NeedsJinja, render_template

IGNORE_INDEX = -100


class DataError(ValueError):
    """A data file the trainer refuses before training; the message names the file and line."""


@dataclass(frozen=True)
class Example:
    """One validated record: input/output pieces, or a text (rendered from a template)."""

    index: int
    line: int
    prompt: str | None = None  # shape (b)
    response: str | None = None  # shape (b)
    text: str | None = None  # shapes (a) and (c), rendered with placeholder special tokens
    template: str | None = None  # shapes (a, c): re-rendered with the tokenizer's special tokens
    record: dict = field(default_factory=dict, compare=False, repr=False)

    def render(self, special_tokens: dict | None) -> str:
        if self.template is None:
            return self.text
        return render_template(self.template, self.record, special_tokens or {})


def _read_array(path: Path, text: str) -> list[tuple[int, dict]]:
    """A JSON array of objects, each with the line its object starts on."""
    decoder = json.JSONDecoder()
    records = []
    pos = text.index("[") + 1

    def skip(p):
        while p < len(text) and text[p] in " \t\r\n":
            p += 1
        return p

    def line_of(p):
        return text.count("\n", 0, p) + 1

    pos = skip(pos)
    if pos < len(text) and text[pos] == "]":
        return records
    while True:
        record, end = _decode(path, lambda at=pos: decoder.raw_decode(text, at), None)
        _object(path, line_of(pos), record, " in the array")
        records.append((line_of(pos), record))
        pos = skip(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip(pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            if skip(pos + 1) != len(text):
                raise DataError(f"{path}:{line_of(pos)}: text after the end of the JSON array")
            return records
        raise DataError(f"{path}:{line_of(pos)}: malformed JSON array: expected ',' or ']'")


def _decode(path, parse, line: int | None):
    """parse(), or a DataError naming the file and line (`line`, else the error's own)."""
    try:
        return parse()
    except json.JSONDecodeError as exc:
        where = exc.lineno if line is None else line
        raise DataError(f"{path}:{where}: malformed JSON: {exc.msg} (column {exc.colno})") from None


def _object(path, line: int, record, where: str = "") -> None:
    if not isinstance(record, dict):
        raise DataError(
            f"{path}:{line}: expected a JSON object{where}, got {type(record).__name__}"
        )


def read_records(path: str | Path) -> list[tuple[int, dict]]:
    """Parse JSON Lines or a JSON array into (line number, record) pairs; refuse anything
    malformed, naming the file and line."""
    path = Path(path)
    raw = read_or_refuse(path, lambda why: DataError(f"{path}: cannot read data file: {why}"), True)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8 text ({exc.reason})") from None
    if text.lstrip().startswith("["):
        records = _read_array(path, text)
    else:
        records = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            record = _decode(path, lambda line=line: json.loads(line), number)
            _object(path, number, record)
            records.append((number, record))
    if not records:
        raise DataError(f"{path}: empty data file (no JSON records)")
    return records


read_jsonl = read_records  # the old name


def _field(path, number, record, name) -> str:
    if name not in record:
        raise DataError(f"{path}:{number}: missing field {name!r} (record has {sorted(record)})")
    value = record[name]
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise DataError(
            f"{path}:{number}: field {name!r} must be a string, not {type(value).__name__}"
        )
    return str(value)


def _render(path, number, record, template, special) -> str | None:
    try:
        return render_template(template, record, special)
    except KeyError as exc:
        name = exc.args[0]
        raise DataError(
            f"{path}:{number}: missing field {name!r} (record has {sorted(record)})"
        ) from None
    except ValueError as exc:
        raise DataError(f"{path}:{number}: {exc}") from None
    except NeedsJinja:
        return None  # full Jinja, and jinja2 is not installed here (the host): checked in the image


def _check_template(path, number, text, response_template) -> None:
    if text is not None and response_template and response_template not in text:
        raise DataError(
            f"{path}:{number}: response_template {response_template!r} not found in the text"
        )


def load_examples(
    path: str | Path,
    dataset_text_field: str | None = None,
    response_template: str | None = None,
    data_formatter_template: str | None = None,
    special_tokens: dict | None = None,
) -> list[Example]:
    """Read and validate a whole file into Examples. Pure Python: safe to call before rendezvous
    (and on the host). ``special_tokens``: the tokenizer's special_tokens_map, where known."""
    special = {name: f"<{name}>" for name in SPECIAL_NAMES}
    special.update(special_tokens or {})
    examples = []
    for index, (number, record) in enumerate(read_records(path)):
        if data_formatter_template:
            template = data_formatter_template
        elif dataset_text_field:
            _field(path, number, record, dataset_text_field)
            template = "{{ element[" + repr(dataset_text_field) + "] }}{{ eos_token }}"
        else:
            prompt = _field(path, number, record, "input")
            response = _field(path, number, record, "output")
            examples.append(Example(index, number, prompt=prompt, response=response))
            continue
        text = _render(path, number, record, template, special)
        _check_template(path, number, text, response_template)
        examples.append(Example(index, number, text=text, template=template, record=record))
    return examples


def response_template_ids(tokenizer, response_template: str) -> list[int]:
    """fms's token ids for the response template: encoded without special tokens, first two
    dropped (fms's get_data_collator: ``encode(response_template)[2:]``)."""
    ids = tokenizer.encode(response_template, add_special_tokens=False)[2:]
    if not ids:
        raise DataError(
            f"response_template {response_template!r} is "
            f"{len(tokenizer.encode(response_template, add_special_tokens=False))} token(s) with"
            " this tokenizer; fms drops the first two token ids and searches for the rest, so it"
            " needs at least 3 (fms itself fails with an IndexError): use a longer template"
        )
    return ids


def _mask_through_last(labels: list[int], template_ids: list[int]) -> bool:
    """trl's DataCollatorForCompletionOnlyLM: mask through the end of the template's last
    occurrence (searched in the labels); all masked when it is absent. True if found."""
    n, start = len(template_ids), None
    for i in range(len(labels) - n + 1):
        if labels[i] == template_ids[0] and labels[i : i + n] == template_ids:
            start = i
    if start is None:
        labels[:] = [IGNORE_INDEX] * len(labels)
        return False
    labels[: start + n] = [IGNORE_INDEX] * (start + n)
    return True


def tokenize_example(
    example: Example, tokenizer, max_seq_length: int, response_template: str | None = None
) -> dict:
    """Token ids and labels for one Example, as fms-hf-tuning 3.2.2 makes them."""
    max_len = min(max_seq_length, getattr(tokenizer, "model_max_length", max_seq_length))
    eos = tokenizer.eos_token or ""
    if example.text is None and example.template is None:  # (b) input/output
        prompt, response = example.prompt, example.response
        blank = (" ", "\n", "\t")
        joiner = "" if prompt.endswith(blank) or response.startswith(blank) else " "
        kw = {"max_length": max_len, "truncation": True}
        input_ids = list(tokenizer(prompt + joiner + response + eos, **kw)["input_ids"])
        n_prompt = len(tokenizer(prompt, **kw)["input_ids"])
        labels = [IGNORE_INDEX] * n_prompt + input_ids[n_prompt:]
    else:  # (a, c) a text, EOS appended unless it ends with it
        text = example.render(getattr(tokenizer, "special_tokens_map", None))
        if not text.endswith(eos):
            text += eos
        input_ids = list(tokenizer(text)["input_ids"])[:max_len]
        pad = tokenizer.pad_token_id
        labels = [IGNORE_INDEX if t == pad else t for t in input_ids]
        if response_template:
            template_ids = response_template_ids(tokenizer, response_template)
            if not _mask_through_last(labels, template_ids):
                warnings.warn(
                    f"record {example.index} (line {example.line}): response_template"
                    f" {response_template!r} not found in its first {max_len} tokens; it adds"
                    " nothing to the loss (as in fms)",
                    stacklevel=2,
                )
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
    examples: list[Example],
    tokenizer,
    max_seq_length: int,
    path="",
    response_template: str | None = None,
) -> TokenizedDataset:
    rows = [tokenize_example(e, tokenizer, max_seq_length, response_template) for e in examples]
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
