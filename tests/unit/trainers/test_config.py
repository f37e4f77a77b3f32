"""Argument parsing, job files (JSON, YAML, env var), precedence, refusals; accelerate fixtures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.paths import ROOT
from tuning.container.sft.config import ConfigError, SFTConfig
from tuning.container.sft.config_args import CONFIG_ENV, parse_args

REQUIRED = ["--model_name_or_path", "m", "--training_data_path", "d.jsonl", "--output_dir", "out"]


def test_flags_named_as_fms_users_type_them():
    cfg = parse_args(
        REQUIRED
        + ["--num_train_epochs", "2", "--per_device_train_batch_size", "8"]
        + [
            "--gradient_accumulation_steps",
            "2",
            "--learning_rate",
            "1e-4",
            "--max_seq_length",
            "64",
        ]
        + ["--torch_dtype", "bfloat16", "--peft_method", "lora", "--r", "4", "--lora_alpha", "16"]
        + [
            "--target_modules",
            "q_proj,v_proj",
            "--ddp_timeout",
            "30",
            "--response_template",
            "## Label:",
        ]
        + ["--save_strategy", "steps", "--save_steps", "5", "--resume_from_checkpoint", "true"],
        environ={},
    )
    assert cfg.num_train_epochs == 2.0 and cfg.per_device_train_batch_size == 8
    assert cfg.gradient_accumulation_steps == 2 and cfg.learning_rate == 1e-4
    assert cfg.torch_dtype == "bfloat16" and cfg.peft_method == "lora" and cfg.r == 4
    assert cfg.target_modules == ["q_proj", "v_proj"] and cfg.ddp_timeout == 30
    assert cfg.save_strategy == "steps" and cfg.save_steps == 5
    assert cfg.resume_from_checkpoint == "true"
    assert cfg.tokenizer_path == "m"  # defaults to the model


def test_defaults():
    cfg = parse_args(REQUIRED, environ={})
    assert cfg.torch_dtype == "float32" and cfg.peft_method == "none"
    assert cfg.target_modules is None and cfg.max_steps == -1
    assert cfg.resume_from_checkpoint is None


def _job(tmp_path: Path, suffix: str, data: dict) -> Path:
    path = tmp_path / f"job{suffix}"
    path.write_text(json.dumps(data) if suffix == ".json" else yaml.safe_dump(data))
    return path


JOB = {"model_name_or_path": "m", "training_data_path": "d", "output_dir": "o", "max_steps": 7}


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_job_file(tmp_path, suffix):
    job = _job(
        tmp_path, suffix, {**JOB, "target_modules": ["c_attn"], "resume_from_checkpoint": True}
    )
    cfg = parse_args(["--config", str(job)], environ={})
    assert (cfg.model_name_or_path, cfg.max_steps, cfg.target_modules) == ("m", 7, ["c_attn"])
    assert cfg.resume_from_checkpoint == "true"


def test_env_var_names_the_job_file(tmp_path):
    job = _job(tmp_path, ".json", JOB)
    cfg = parse_args([], environ={CONFIG_ENV: str(job)})
    assert cfg.max_steps == 7


def test_precedence_flag_over_config_flag_over_env(tmp_path):
    env_job = _job(tmp_path, ".json", {**JOB, "max_steps": 1, "seed": 5})
    (tmp_path / "b").mkdir()
    flag_job = _job(tmp_path / "b", ".yaml", {**JOB, "max_steps": 2, "learning_rate": 0.5})
    cfg = parse_args(["--config", str(flag_job)], environ={CONFIG_ENV: str(env_job)})
    assert cfg.max_steps == 2 and cfg.seed == 42  # --config wins over the env var, not merged
    cfg = parse_args(["--config", str(flag_job), "--max_steps", "9"], environ={})
    assert cfg.max_steps == 9 and cfg.learning_rate == 0.5  # flag over file, file over default


def test_unknown_key_in_job_file_names_key_and_file(tmp_path):
    job = _job(tmp_path, ".yaml", {**JOB, "num_epochs": 3})
    with pytest.raises(ConfigError) as err:
        parse_args(["--config", str(job)], environ={})
    assert "num_epochs" in str(err.value) and str(job) in str(err.value)


@pytest.mark.parametrize(
    "data, words",
    [
        ({**JOB, "max_steps": "many"}, ["max_steps", "many"]),
        ({**JOB, "max_steps": 1.5}, ["max_steps"]),
        ({**JOB, "target_modules": [1, 2]}, ["target_modules"]),
        ({**JOB, "peft_method": "pt"}, ["peft_method"]),
        ({k: v for k, v in JOB.items() if k != "output_dir"}, ["output_dir"]),
        ({**JOB, "data_formatter_template": "{{input}}"}, ["response_template"]),
    ],
)
def test_bad_values_refused(tmp_path, data, words):
    job = _job(tmp_path, ".json", data)
    with pytest.raises(ConfigError) as err:
        parse_args(["--config", str(job)], environ={})
    for word in words:
        assert word in str(err.value)


def test_unparseable_and_non_mapping_job_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json"):
        parse_args(["--config", str(bad)], environ={})
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        parse_args(["--config", str(listed)], environ={})
    with pytest.raises(ConfigError, match="cannot read"):
        parse_args(["--config", str(tmp_path / "missing.yaml")], environ={})


def test_unknown_flag_and_no_abbreviations():
    with pytest.raises(ConfigError, match="--bogus"):
        parse_args(REQUIRED + ["--bogus", "1"], environ={})
    with pytest.raises(ConfigError, match="--max_step"):
        parse_args(REQUIRED + ["--max_step", "1"], environ={})


def test_every_field_is_a_flag():
    from dataclasses import fields

    from tuning.container.sft.config_args import build_parser

    flags = {a.dest for a in build_parser()._actions}
    assert {f.name for f in fields(SFTConfig)} <= flags


def test_cli_refusal_exits_2_without_traceback(tmp_path):
    job = _job(tmp_path, ".yaml", {**JOB, "nope": 1})
    proc = subprocess.run(
        [sys.executable, "-m", "tuning.sft_trainer", "--config", str(job)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "nope" in proc.stderr and str(job) in proc.stderr
    assert "Traceback" not in proc.stderr


# accelerate's own loader reads the fixtures; an unknown key raises there.
FIXTURES = sorted((ROOT / "configs" / "accelerate").glob("*.yaml"))


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_accelerate_fixture_loads(path):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(path))
    assert config.distributed_type in ("MULTI_GPU", "FSDP")
    assert config.rdzv_backend == "static" and config.same_network is True
    if path.stem == "fsdp":
        assert config.fsdp_config["fsdp_sharding_strategy"] == 1
        assert config.fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT"


def test_accelerate_fixture_names():
    assert {p.stem for p in FIXTURES} >= {"cpu", "ddp", "fsdp"}


def test_accelerate_loader_rejects_unknown_key(tmp_path):
    from accelerate.commands.config.config_args import load_config_from_file

    bad = tmp_path / "bad.yaml"
    data = yaml.safe_load((ROOT / "configs" / "accelerate" / "cpu.yaml").read_text())
    bad.write_text(yaml.safe_dump({**data, "max_restarts": 3}))
    with pytest.raises(ValueError, match="max_restarts"):
        load_config_from_file(str(bad))


def test_fms_command_line_forms():
    cfg = parse_args(
        REQUIRED
        + [
            "--target_modules",
            "q_proj",
            "v_proj",
            "--gradient_checkpointing",
            "--peft_method",
            "LORA",
            "--response_template",
            "\\n### Label:",
            "--data_formatter_template",
            "{{input}}\\n\\n### Label: {{output}}",
            "--use_flash_attn",
            "false",
            "--include_tokens_per_second",
        ],
        environ={},
    )
    assert cfg.target_modules == ["q_proj", "v_proj"] and cfg.gradient_checkpointing is True
    assert cfg.peft_method == "lora"
    assert cfg.response_template == "\n### Label:"  # unescaped as fms does
    assert cfg.data_formatter_template == "{{input}}\n\n### Label: {{output}}"


def test_fms_job_json_keys(tmp_path):
    job = _job(
        tmp_path,
        ".json",
        {
            **JOB,
            "use_flash_attn": False,
            "packing": False,
            "include_tokens_per_second": True,
            "save_model_dir": "s",
            "trackers": ["file_logger"],
            "bf16": False,
            "resume_from_checkpoint": False,
        },
    )
    cfg = parse_args(["--config", str(job)], environ={})
    assert cfg.save_model_dir == "s" and cfg.resume_from_checkpoint == "false"


@pytest.mark.parametrize(
    "extra, word",
    [
        ({"packing": True}, "packing"),
        ({"trackers": ["aim"]}, "aim"),
        ({"bf16": True}, "bf16"),
        ({"peft_method": "PT"}, "prompt tuning"),
        ({"use_dora": True}, "use_dora"),
        (
            {"data_config_path": "d.yaml"},
            "data_config_path.*instruction_template and response_template",
        ),
    ],
)
def test_fms_keys_that_change_training_are_refused_by_name(tmp_path, extra, word):
    job = _job(tmp_path, ".json", {**JOB, **extra})
    with pytest.raises(ConfigError, match=word):
        parse_args(["--config", str(job)], environ={})
