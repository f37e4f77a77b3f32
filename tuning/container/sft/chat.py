"""Chat records (``messages`` / ``conversations``: turns of role and content) trained as
fms-hf-tuning 3.2.2 trains them with ``instruction_template`` and ``response_template`` set.

fms has two chat routes that label differently; this is the one its job keys drive (its
setup_dataprocessor.py ``_get_chat_dataset_handlers``), not its data config's
``tokenize_and_apply_chat_template_with_masking`` handler (``data_config_path``, refused here):

1. The turns are the record's ``dataset_conversation_field``. fms 3.2.2's
   ``apply_tokenizer_chat_template`` means to find ``messages`` (or ``conversation``, ``chat``,
   ``turns``) without it, but only in a ``dict``, and the rows its ``datasets`` (4.8) hands it
   are not dicts: it always passes the whole record to the chat template as ``messages``, which
   a template over the turns renders as an empty text (fms then trains on nothing; seen on its
   own single_turn_chat.jsonl). So a chat job without the field is refused here, naming it.
2. It is rendered to text by the tokenizer's chat template (``chat_template`` in the job
   replaces it), with the record's ``tools`` and ``documents``; a tokenizer without a chat
   template is refused, naming the fix.
3. The text is trained like a text field (tuning/container/sft/data.py): EOS appended unless it ends
   with it, tokenized with the tokenizer's own special tokens, padding masked.
4. Labels as trl 0.19's DataCollatorForCompletionOnlyLM with both templates (the token ids of
   each, encoded without special tokens): everything is masked except from the end of each
   response template to the start of the next instruction template; a text whose ids lack
   either template is all masked (fms warns; so does this trainer). So only the assistant
   turns count in the loss, their end-of-turn tokens included.
"""

from __future__ import annotations

import warnings

from tuning.container.sft.files import DataError

IGNORE_INDEX = -100  # a label the loss skips (torch's CrossEntropyLoss ignore_index)


def config_problem(cfg) -> str | None:
    """What is wrong with a job's chat keys, if anything. fms 3.2.2 trains chat records when
    instruction_template and response_template are both set and ignores its chat keys
    otherwise: here a key that would do nothing is refused."""
    if cfg.instruction_template and not cfg.response_template:
        return (
            "instruction_template needs a response_template (chat records: the text"
            " that starts a user turn and the one that starts an assistant turn): set"
            " both"
        )
    if cfg.dataset_conversation_field and not cfg.instruction_template:
        return (
            "dataset_conversation_field is read only for chat records: set"
            " instruction_template and response_template too"
        )
    if cfg.instruction_template and cfg.data_formatter_template:
        return (
            "data_formatter_template does nothing with chat records (instruction_template"
            " set; fms ignores it too): remove one of them"
        )
    return None


def _is_turns(value) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and isinstance(value[0], dict)
        and "role" in value[0]
    )


def conversation_of(where: str, record: dict, field: str | None) -> list[dict]:
    """The record's turns (its `field`); a DataError naming the fix if there are none."""
    if not field or field not in record:
        found = [k for k, v in record.items() if _is_turns(v)]
        fix = (
            f"set dataset_conversation_field: {found[0]}"
            if found
            else (
                "put the turns (a list of {'role': ..., 'content': ...}) in a field and set"
                " dataset_conversation_field to its name"
            )
        )
        what = (
            f"dataset_conversation_field {field!r} is not in the record"
            if field
            else "no dataset_conversation_field"
        )
        raise DataError(
            f"{where}: {what} (record has {sorted(record)}). fms 3.2.2 reads the turns from it;"
            " without it fms hands the whole record to the chat template, which renders no"
            f" turns, and trains on nothing: {fix}"
        )
    turns = record[field]
    if not isinstance(turns, list) or not turns:
        raise DataError(f"{where}: the conversation must be a non-empty list of turns")
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("role"), str):
            raise DataError(
                f"{where}: turn {i} of the conversation is not a dict with a 'role'"
                f" ({turn!r:.80}): each turn is {{'role': ..., 'content': ...}}"
            )
    return turns


def require_template(tokenizer, tokenizer_path: str) -> None:
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(
            f"chat records need a chat template and the tokenizer at {tokenizer_path} has none:"
            ' set chat_template in the job (the Jinja text, e.g. "{% for message in messages'
            " %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token }}{% endfor"
            ' %}"), or use a tokenizer that has one (its tokenizer_config.json chat_template)'
        )


NAMES = ("instruction_template", "response_template")


def text(turns: list[dict], record: dict, tokenizer, templates: tuple, where: str) -> str:
    """The conversation as the chat template writes it (fms: no generation prompt, the
    record's tools and documents); both templates must be in it."""
    require_template(tokenizer, getattr(tokenizer, "name_or_path", "?"))
    out = tokenizer.apply_chat_template(
        turns, tools=record.get("tools"), documents=record.get("documents"), tokenize=False
    )
    for name, template in zip(NAMES, templates, strict=True):
        if template not in out:
            raise DataError(
                f"{where}: {name} {template!r} is not in the text the chat template makes of"
                f" this record ({out[:160]!r}...): set it to the text that starts a"
                f" {'user' if name == NAMES[0] else 'assistant'} turn there"
            )
    return out


def template_ids(tokenizer, template: str, name: str) -> list[int]:
    """trl's ids for a template given as text: encoded without special tokens, whole."""
    ids = tokenizer.encode(template, add_special_tokens=False)
    if not ids:
        raise DataError(f"{name} {template!r} encodes to no tokens with this tokenizer")
    return ids


def mask(labels: list[int], tokenizer, templates: tuple, what: str) -> None:
    """mask_turns with the templates' ids; warns (as trl) when a template is not found."""
    ids = [template_ids(tokenizer, t, name) for name, t in zip(NAMES, templates, strict=True)]
    if not mask_turns(labels, *ids):
        warnings.warn(
            f"{what}: instruction_template {templates[0]!r} or response_template"
            f" {templates[1]!r} not found in its first {len(labels)} tokens; it adds nothing"
            " to the loss (as in fms)",
            stacklevel=3,
        )


def _starts(labels: list[int], ids: list[int]) -> list[int]:
    n = len(ids)
    return [i for i in range(len(labels) - n + 1) if labels[i : i + n] == ids]


def mask_turns(labels: list[int], instruction_ids: list[int], response_ids: list[int]) -> bool:
    """trl's DataCollatorForCompletionOnlyLM with an instruction template, on one row's labels
    (padding already -100): True if both templates were found."""
    responses = [i + len(response_ids) for i in _starts(labels, response_ids)]
    humans = _starts(labels, instruction_ids) if responses else []
    if not responses or not humans:
        labels[:] = [IGNORE_INDEX] * len(labels)
        return False
    if humans[0] > responses[0]:  # the text opens with an assistant turn
        humans = [0] + humans
    for k, (start, end) in enumerate(zip(humans, responses, strict=False)):
        begin = start if k else 0
        labels[begin:end] = [IGNORE_INDEX] * (end - begin)
    if len(responses) < len(humans):  # a last user turn with no answer
        labels[humans[-1] :] = [IGNORE_INDEX] * (len(labels) - humans[-1])
    return True
