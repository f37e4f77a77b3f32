"""Which shape a dataset's records make with the job's settings, decided from the first record's
fields (or, on the host, a table's columns) as fms-hf-tuning 3.2.2 decides it
(its tuning/data/setup_dataprocessor.py ``_process_raw_data_args``), and the errors that name
what was found and what is accepted."""

from __future__ import annotations

from tuning.container.sft.files import DataError, Record
from tuning.container.sft.records import describe

SHAPES = (
    "'input' and 'output' fields (the default); a text field named by dataset_text_field, with"
    " response_template; data_formatter_template over the record's fields; 'input_ids' and"
    " 'labels' (pre-tokenized); chat turns ('messages', or dataset_conversation_field) with"
    " instruction_template and response_template"
)
CHAT_FIELDS = ("messages", "conversations")  # trl's conversational records
FORMATTING = (
    "dataset_text_field",
    "response_template",
    "data_formatter_template",
    "instruction_template",
    "dataset_conversation_field",
)


def formatting(cfg) -> dict:
    """The job's keys that shape its records: load_examples' and check_columns' arguments."""
    return {name: getattr(cfg, name) for name in FORMATTING}


def _pretokenized_rules(first: Record, path, formatting: dict) -> None:
    """fms's Data Format 1 (setup_dataprocessor.is_pretokenized_dataset: both columns)."""
    if "labels" not in first.data:
        raise DataError(
            f"{first.where}: 'input_ids' without 'labels' ({describe(path)}; record has"
            f" {sorted(first.data)}): fms 3.2.2 takes records as pre-tokenized only with both"
            " columns. Add 'labels' (a copy of input_ids trains on every token; -100 leaves a"
            " token out of the loss)"
        )
    given = [name for name, value in formatting.items() if value]
    if given:
        raise DataError(
            f"{path}: pre-tokenized records (input_ids, labels) take no {', '.join(given)}"
            " (fms refuses them too): remove it from the job"
        )


def shape_of(
    first: Record,
    path,
    dataset_text_field=None,
    response_template=None,
    data_formatter_template=None,
    instruction_template=None,
    dataset_conversation_field=None,
) -> str:
    """The shape the first record's fields (or a table's columns) make with the config: "p",
    "chat", "io" or "text"; a DataError naming what was found and what is accepted when none."""
    keys = set(first.data)
    text_field, formatter = dataset_text_field, data_formatter_template
    if "input_ids" in keys:
        formatting = {
            "dataset_text_field": text_field,
            "response_template": response_template,
            "data_formatter_template": formatter,
            "instruction_template": instruction_template,
            "dataset_conversation_field": dataset_conversation_field,
        }
        _pretokenized_rules(first, path, formatting)
        return "p"
    if instruction_template and response_template:  # fms's chat route comes next
        return "chat"
    if formatter or text_field:
        if text_field and not formatter and text_field not in keys:
            raise DataError(
                f"{first.where}: missing field {text_field!r} (record has {sorted(keys)})"
            )
        return "text"
    if keys & {"input", "output"}:
        for name in ("input", "output"):
            if name not in keys:
                raise DataError(
                    f"{first.where}: missing field {name!r} (record has {sorted(keys)})"
                )
        return "io"
    if keys & set(CHAT_FIELDS):
        raise DataError(
            f"{first.where}: chat records ({describe(path)}; record has {sorted(keys)}) need"
            " instruction_template and response_template (the text that starts a user turn and"
            " an assistant turn in the chat template's output, e.g. '<|user|>' and"
            " '<|assistant|>'), and dataset_conversation_field (the field holding the turns),"
            " as fms 3.2.2 needs them; chat_template if the tokenizer has none"
        )
    raise DataError(
        f"{first.where}: the record matches no shape we train on ({describe(path)}; record has"
        f" {sorted(keys)}). Accepted: {SHAPES}"
    )


def check_columns(path, columns: list[str], **formatting) -> None:
    """The host's check of a table it cannot read rows of: its columns make a shape
    (``formatting``: load_examples' keyword arguments)."""
    shape_of(Record(f"{path} (columns)", 0, dict.fromkeys(columns)), path, **formatting)
