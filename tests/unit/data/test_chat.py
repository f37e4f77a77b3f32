"""Chat records trained as fms-hf-tuning 3.2.2 trains them with instruction_template and
response_template (tuning/container/sft/chat.py): the conversation found as fms finds it, rendered
by the chat template, only the assistant turns in the loss (trl's rule), refusals that name the fix.
Token-for-token parity with fms's own run: tests/engine/trainers/test_fms_batches.py (chat
cases)."""

from __future__ import annotations

import json

import pytest

from support.launch import run_launch
from support.tokenizer_models import CHAT_TEMPLATE, added_tokens
from tuning.container.sft.chat import IGNORE_INDEX, conversation_of, mask_turns
from tuning.container.sft.config import ConfigError
from tuning.container.sft.config_args import parse_args
from tuning.container.sft.data import load_examples, tokenize_example
from tuning.container.sft.files import DataError
from tuning.harness.checks.preflight import check_data
from tuning.harness.errors import HarnessError

X = IGNORE_INDEX
CHAT = {
    "instruction_template": "<|user|>",
    "response_template": "<|assistant|>",
    "dataset_conversation_field": "messages",
}
TURNS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "ant cat"},
    {"role": "assistant", "content": "teal red"},
    {"role": "user", "content": "yak"},
    {"role": "assistant", "content": "navy"},
]


@pytest.mark.parametrize(
    "labels, expected",
    [  # instruction [7], response [8, 9]
        ([1, 7, 5, 8, 9, 4, 4, 2], [X, X, X, X, X, 4, 4, 2]),
        ([1, 7, 5, 8, 9, 4, 2, 7, 6, 8, 9, 3, 2], [X, X, X, X, X, 4, 2, X, X, X, X, 3, 2]),
        ([8, 9, 4, 2, 7, 5, 8, 9, 3], [X, X, 4, 2, X, X, X, X, 3]),  # opens with the assistant
        ([1, 7, 5, 8, 9, 4, 2, 7, 6, 6], [X, X, X, X, X, 4, 2, X, X, X]),  # unanswered user
        ([1, 7, 5, 4, 2], [X] * 5),  # no response template
        ([1, 5, 8, 9, 4, 2], [X] * 6),  # no instruction template
        ([1, 7, 5, 8, 9, 4, X, X], [X, X, X, X, X, 4, X, X]),  # padding stays masked
    ],
)
def test_only_the_assistant_turns_count(labels, expected):
    found = mask_turns(labels, [7], [8, 9])
    assert labels == expected
    assert found == (expected != [X] * len(expected))


def test_the_turns_are_read_from_dataset_conversation_field():
    record = {"messages": TURNS, "group": "g", "metadata": "{}"}
    assert conversation_of("f:1", record, "messages") is TURNS
    assert conversation_of("f:1", {"conversations": TURNS, "id": 1}, "conversations") is TURNS
    # fms 3.2.2 without it renders the whole record, i.e. nothing: refused, naming the field
    with pytest.raises(
        DataError,
        match="f:1: no dataset_conversation_field .*trains on nothing:"
        " set dataset_conversation_field: messages",
    ):
        conversation_of("f:1", record, None)
    with pytest.raises(DataError, match="dataset_conversation_field: conversations"):
        conversation_of("f:2", {"conversations": TURNS, "id": 1}, None)
    missing = "f:3: dataset_conversation_field 'turns' is not in the record.*: messages"
    with pytest.raises(DataError, match=missing):
        conversation_of("f:3", {"messages": TURNS}, "turns")
    with pytest.raises(DataError, match="f:4: turn 1 .* is not a dict with a 'role'"):
        conversation_of("f:4", {"messages": [TURNS[0], "hi"], "id": 1}, "messages")


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    return added_tokens(tmp_path_factory.mktemp("chat") / "model")


@pytest.fixture(scope="module")
def chat_tokenizer(chat_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _write(tmp_path, rows, name="chat.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_chat_record_labels_hold_the_assistant_turns_and_their_eos(chat_tokenizer, tmp_path):
    path = _write(tmp_path, [{"messages": TURNS, "group": "g"}])
    (example,) = load_examples(path, **CHAT)
    row = tokenize_example(example, chat_tokenizer, 512, CHAT["response_template"])
    kept = [t for t in row["labels"] if t != X]
    eos = chat_tokenizer.eos_token
    assert chat_tokenizer.decode(kept) == f"\nteal red{eos}\n\nnavy{eos}"
    assert row["input_ids"][-1] == chat_tokenizer.eos_token_id == row["labels"][-1]


def test_chat_refusals_name_the_fix(chat_model, chat_tokenizer, tmp_path):
    from transformers import AutoTokenizer

    path = _write(tmp_path, [{"messages": TURNS, "group": "g"}])
    (example,) = load_examples(path, **CHAT)
    bare = AutoTokenizer.from_pretrained(chat_model)
    with pytest.raises(DataError, match="has none: set chat_template in the job"):
        tokenize_example(example, bare, 512, "<|assistant|>")
    (example,) = load_examples(path, **{**CHAT, "instruction_template": "### Human:"})
    with pytest.raises(
        DataError,
        match=r"chat.jsonl:1: instruction_template '### Human:' is not"
        " in the text the chat template makes",
    ):
        tokenize_example(example, chat_tokenizer, 512, "<|assistant|>")


def test_chat_keys_are_taken_as_fms_takes_them():
    base = ["--model_name_or_path", "m", "--training_data_path", "d", "--output_dir", "o"]
    cfg = parse_args(
        [
            *base,
            "--chat_template",
            "{{ 'a' }}\\n",
            "--instruction_template",
            "<|user|>\\n",
            "--response_template",
            "<|assistant|>",
            "--dataset_conversation_field",
            "conversations",
        ],
        environ={},
    )
    assert cfg.chat_template == "{{ 'a' }}\n" and cfg.instruction_template == "<|user|>\n"
    with pytest.raises(ConfigError, match="instruction_template needs a response_template"):
        parse_args([*base, "--instruction_template", "<|user|>"], environ={})
    with pytest.raises(ConfigError, match="dataset_conversation_field is read only for chat"):
        parse_args([*base, "--dataset_conversation_field", "c"], environ={})


def test_host_check_refuses_chat_records_before_anything_starts(tmp_path):
    cfg = parse_args(
        [
            "--model_name_or_path",
            "m",
            "--training_data_path",
            "d",
            "--output_dir",
            "o",
            "--instruction_template",
            "<|user|>",
            "--response_template",
            "<|assistant|>",
            "--dataset_conversation_field",
            "messages",
        ],
        environ={},
    )
    check_data(str(_write(tmp_path, [{"messages": TURNS, "id": 1}] * 2)), cfg)
    bad = _write(tmp_path, [{"messages": TURNS, "id": 1}, {"conversations": TURNS}], "bad.jsonl")
    with pytest.raises(
        HarnessError,
        match="bad.jsonl:2: dataset_conversation_field 'messages' is not in the record",
    ):
        check_data(str(bad), cfg)


def test_two_ranks_train_on_chat_records(chat_model, tmp_path):
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"ant {i}"},
                {"role": "assistant", "content": f"teal {i}"},
            ],
            "id": i,
        }
        for i in range(8)
    ]
    job = tmp_path / "job.json"
    job.write_text(json.dumps({**CHAT, "chat_template": CHAT_TEMPLATE}))
    out = tmp_path / "out"
    proc = run_launch(
        [
            "--config",
            str(job),
            "--model_name_or_path",
            str(chat_model),
            "--training_data_path",
            str(_write(tmp_path, rows)),
            "--output_dir",
            str(out),
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "2",
            "--save_strategy",
            "no",
        ]
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["world_size"] == 2 and summary["tokenizer"]["chat_template_from_job"]
