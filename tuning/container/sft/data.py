"""Training data: five shapes, validated before training, tokenized and masked as fms-hf-tuning
3.2.2 does it (tests/engine/trainers/test_fms_batches.py compares the batches fms's own Trainer
feeds the model with ours, token for token).

Files and directories are read as fms reads them (tuning/container/sft/records.py): JSON Lines or a
JSON array, Parquet, Arrow, text, or a directory of them.
Shapes (chosen from the config and the records, as fms chooses them):
  (p) ``input_ids`` + ``labels`` (pre-tokenized; fms needs both columns): passed through as they
      are, truncated to max_seq_length as trl truncates them;
  (a) ``dataset_text_field`` + ``response_template``: the field's text plus the EOS token;
  (b) ``input``/``output`` fields (the default): ``input [+ " "] + output + EOS``, input masked;
  (c) ``data_formatter_template`` over the record's fields, with ``response_template``:
      ``{{input}}``, ``{{element['Tweet text']}}`` (fms's Jinja form) and ``{{Tweet text}}`` (a
      field name with spaces, fms's older form) are filled; other Jinja needs ``jinja2``.
  (chat) turns in the field dataset_conversation_field names, with instruction_template and
      response_template: rendered by the chat template, then as (a); masked by trl's rule for
      both templates (only the assistant turns count: tuning/container/sft/chat.py).
Masking, as fms: (b) labels are -100 over as many tokens as the input alone tokenizes to;
(a, c) like trl's DataCollatorForCompletionOnlyLM with fms's template ids
(``encode(response_template)[2:]``): everything up to the end of the template's LAST occurrence
in the token ids is -100, and a record where it is not found (e.g. truncated away) is all -100.
A template absent from a record's text altogether is refused here, with its file and line.
Pad-token ids in (a, c, chat) labels are -100 (as DataCollatorForLanguageModeling does); the
tokenizer's pad token is fms's (tuning/container/sft/special_tokens.py: <PAD> where it has none or
it is the EOS), so the EOS stays in the labels.
Every record carries an ``index`` (its position in the dataset); the collator turns it into
``sample_index`` so the trainer can log which samples a rank used, and never feeds it to the model.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from tuning.container.sft import chat
from tuning.container.sft.chat import IGNORE_INDEX
from tuning.container.sft.files import DataError, Record
from tuning.container.sft.records import read_path
from tuning.container.sft.shapes import shape_of
from tuning.container.sft.template import SPECIAL_NAMES, NeedsJinja, render_template


@dataclass(frozen=True)
class Example:
    """One validated record: input/output pieces, a text (from a template), or token ids."""

    index: int
    line: int
    prompt: str | None = None  # shape (b)
    response: str | None = None  # shape (b)
    text: str | None = None  # shapes (a) and (c), rendered with placeholder special tokens
    template: str | None = None  # shapes (a, c): re-rendered with the tokenizer's special tokens
    record: dict = field(default_factory=dict, compare=False, repr=False)
    where: str = ""  # file:line or file row N
    input_ids: list[int] | None = None  # shape (p)
    labels: list[int] | None = None  # shape (p)
    conversation: list[dict] | None = None  # chat: the turns (``record`` has tools, documents)
    instruction_template: str | None = None  # chat

    def render(self, special_tokens: dict | None) -> str:
        if self.template is None:
            return self.text
        return render_template(self.template, self.record, special_tokens or {})


def read_records(path: str | Path) -> list[tuple[int, dict]]:
    """(line or row, record) pairs of a data file or directory; refused if it has none."""
    records = read_path(path)
    if not records:
        raise DataError(f"{path}: empty data file (no records)")
    return [(r.line, r.data) for r in records]


def _field(where, record, name) -> str:
    if name not in record:
        raise DataError(f"{where}: missing field {name!r} (record has {sorted(record)})")
    value = record[name]
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise DataError(f"{where}: field {name!r} must be a string, not {type(value).__name__}")
    return str(value)


def _render(where, record, template, special) -> str | None:
    try:
        return render_template(template, record, special)
    except KeyError as exc:
        name = exc.args[0]
        raise DataError(f"{where}: missing field {name!r} (record has {sorted(record)})") from None
    except ValueError as exc:
        raise DataError(f"{where}: {exc}") from None
    except NeedsJinja:
        return None  # full Jinja, and jinja2 is not installed here (the host): checked in the image


def _check_template(where, text, response_template) -> None:
    if text is not None and response_template and response_template not in text:
        raise DataError(f"{where}: response_template {response_template!r} not found in the text")


def _ids(where, record, name) -> list[int]:
    value = record.get(name)
    if not isinstance(value, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in value
    ):
        raise DataError(f"{where}: {name!r} must be a list of token ids (integers)")
    return value


def _pretokenized(records: list[Record]) -> list[Example]:
    examples = []
    for index, (where, line, record) in enumerate(records):
        ids, labels = _ids(where, record, "input_ids"), _ids(where, record, "labels")
        if len(ids) != len(labels):
            raise DataError(f"{where}: {len(ids)} input_ids but {len(labels)} labels")
        examples.append(Example(index, line, where=where, input_ids=ids, labels=labels))
    return examples


def _chat(records: list[Record], instruction_template: str, field: str | None) -> list[Example]:
    return [
        Example(
            index,
            line,
            where=where,
            record=record,
            instruction_template=instruction_template,
            conversation=chat.conversation_of(where, record, field),
        )
        for index, (where, line, record) in enumerate(records)
    ]


def load_examples(
    path: str | Path,
    dataset_text_field: str | None = None,
    response_template: str | None = None,
    data_formatter_template: str | None = None,
    special_tokens: dict | None = None,
    instruction_template: str | None = None,
    dataset_conversation_field: str | None = None,
) -> list[Example]:
    """Read and validate a whole file or directory into Examples. Safe to call before
    rendezvous (and on the host, for JSON). ``special_tokens``: the tokenizer's
    special_tokens_map, where known."""
    records = read_path(path)
    if not records:
        raise DataError(f"{path}: empty data file (no records)")
    fmt = dict(
        dataset_text_field=dataset_text_field,
        response_template=response_template,
        data_formatter_template=data_formatter_template,
        instruction_template=instruction_template,
        dataset_conversation_field=dataset_conversation_field,
    )
    shape = shape_of(records[0], path, **fmt)
    if shape == "p":
        return _pretokenized(records)
    if shape == "chat":
        return _chat(records, instruction_template, dataset_conversation_field)
    special = {name: f"<{name}>" for name in SPECIAL_NAMES}
    special.update(special_tokens or {})
    examples = []
    for index, (where, line, record) in enumerate(records):
        if data_formatter_template:
            template = data_formatter_template
        elif dataset_text_field:
            _field(where, record, dataset_text_field)
            template = "{{ element[" + repr(dataset_text_field) + "] }}{{ eos_token }}"
        else:
            prompt = _field(where, record, "input")
            response = _field(where, record, "output")
            examples.append(Example(index, line, prompt=prompt, response=response, where=where))
            continue
        text = _render(where, record, template, special)
        _check_template(where, text, response_template)
        examples.append(
            Example(index, line, text=text, template=template, record=record, where=where)
        )
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
    if example.input_ids is not None:  # (p) as they are; trl's truncate_dataset cuts both
        ids, labels = example.input_ids[:max_len], example.labels[:max_len]
        return {"input_ids": list(ids), "labels": list(labels), "index": example.index}
    eos = tokenizer.eos_token or ""
    if example.prompt is not None:  # (b) input/output
        prompt, response = example.prompt, example.response
        blank = (" ", "\n", "\t")
        joiner = "" if prompt.endswith(blank) or response.startswith(blank) else " "
        kw = {"max_length": max_len, "truncation": True}
        input_ids = list(tokenizer(prompt + joiner + response + eos, **kw)["input_ids"])
        n_prompt = len(tokenizer(prompt, **kw)["input_ids"])
        labels = [IGNORE_INDEX] * n_prompt + input_ids[n_prompt:]
    else:  # (a, c, chat) a text, EOS appended unless it ends with it
        if example.conversation is not None:
            templates = (example.instruction_template, response_template)
            text = chat.text(
                example.conversation, example.record, tokenizer, templates, example.where
            )
        else:
            text = example.render(getattr(tokenizer, "special_tokens_map", None))
        if not text.endswith(eos):
            text += eos
        input_ids = list(tokenizer(text)["input_ids"])[:max_len]
        pad = tokenizer.pad_token_id
        labels = [IGNORE_INDEX if t == pad else t for t in input_ids]
        if example.conversation is not None:
            templates = (example.instruction_template, response_template)
            chat.mask(labels, tokenizer, templates, f"record {example.index} ({example.where})")
        elif response_template:
            template_ids = response_template_ids(tokenizer, response_template)
            if not _mask_through_last(labels, template_ids):
                warnings.warn(
                    f"record {example.index} ({example.where}): response_template"
                    f" {response_template!r} not found in its first {max_len} tokens; it adds"
                    " nothing to the loss (as in fms)",
                    stacklevel=2,
                )
    return {"input_ids": input_ids, "labels": labels, "index": example.index}


def tokenize_examples(
    examples: list[Example],
    tokenizer,
    max_seq_length: int,
    path="",
    response_template: str | None = None,
    node=None,
    name: str = "training",
):
    """A tuning.container.sft.tokenized.TokenizedDataset (compact arrays) of the examples. `node`
    (tuning.container.sft.tokenized.Node): this rank tokenizes its slice and maps its node's other
    slices."""
    from tuning.container.sft.tokenized import build

    def tokenize(example):
        return tokenize_example(example, tokenizer, max_seq_length, response_template)

    dataset = build(examples, tokenize, node, name)
    if not dataset.learnable:
        raise DataError(
            f"{path}: no record has a response token within max_seq_length={max_seq_length};"
            " nothing to learn"
        )
    return dataset
