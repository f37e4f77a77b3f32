"""The trainer's whole configuration: one dataclass, read from a job file and the command line.

Precedence, lowest first: the defaults below, the job file (``--config FILE`` or the file named
by ``SFT_TRAINER_CONFIG_JSON_PATH``; ``--config`` wins when both are given), command-line flags.
Argument names, types and defaults are fms-hf-tuning 3.2.2's (its HfArgumentParser over
ModelArguments, DataArguments, TrainingArguments, LoraConfig, trackers): bare ``--flag`` for a
boolean, ``--target_modules q_proj v_proj``, ``peft_method LORA``, ``\\n`` typed in a template
unescaped as fms does. fms keys not implemented here are in tuning/sft/fms_keys.py: NO_OP_KEYS
(accepted, changing nothing) or REFUSED_KEYS (refused by name unless at fms's default).
Pure Python: no torch import here."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from tuning.sft.chat import config_problem as chat_config_problem
from tuning.sft.files import read_or_refuse
from tuning.sft.fms_keys import NO_OP_KEYS, REFUSED_HINTS, REFUSED_KEYS, is_default

CONFIG_ENV = "SFT_TRAINER_CONFIG_JSON_PATH"
# fms unescapes these (DataArguments.__post_init__): "\\n" typed in a flag or a JSON is a newline
UNESCAPED = (
    "data_formatter_template",
    "response_template",
    "instruction_template",
    "chat_template",
)
PEFT_METHODS = ("lora", "none")


class ConfigError(ValueError):
    """A job file or argument the trainer refuses (reported without a traceback, exit 2)."""


@dataclass
class SFTConfig:
    # model
    model_name_or_path: str | None = None
    tokenizer_name_or_path: str | None = None  # defaults to model_name_or_path
    # fms's tokenizer set-up (tuning/sft/special_tokens.py): embedding rows rounded up to a multiple
    # of this; more special tokens to add
    embedding_size_multiple_of: int = 1
    add_special_tokens: list[str] | None = None
    torch_dtype: str = "float32"  # float32 | bfloat16 | float16 | auto
    # data
    training_data_path: str | None = None
    validation_data_path: str | None = None
    dataset_text_field: str | None = None
    response_template: str | None = None
    data_formatter_template: str | None = None  # "### Input: {{input}} \n\n## Label: {{output}}"
    # chat records (tuning/sft/chat.py): fms's instruction and response templates route
    instruction_template: str | None = None  # with response_template: chat records
    chat_template: str | None = None  # replaces the tokenizer's chat template
    dataset_conversation_field: str | None = None  # the field holding the turns
    max_seq_length: int = 4096  # fms's default; the tokenizer's model_max_length caps it
    # optimisation
    output_dir: str | None = None
    num_train_epochs: float = 1.0
    max_steps: int = -1
    per_device_train_batch_size: int = 4
    per_device_eval_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    learning_rate: float = 1e-5
    lr_scheduler_type: str = "linear"
    warmup_ratio: float = 0.0
    warmup_steps: int = 0
    optim: str = "adamw_torch"  # fms's default, passed to the HF Trainer
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    gradient_checkpointing: bool = False
    seed: int = 42
    # one shuffle for every rank. fms 3.2.2 seeds rank r with seed + r (set_seed(device_specific)
    # in its train()): only with data_seed do its ranks share one shuffle, as these always do.
    data_seed: int | None = None
    # logging, evaluation, checkpoints
    logging_strategy: str = "epoch"  # fms's default: no | steps | epoch
    logging_steps: float = 1
    eval_strategy: str = "no"  # no | steps | epoch
    eval_steps: int | None = None
    save_strategy: str = "epoch"  # no | steps | epoch
    save_steps: int = 500
    save_total_limit: int | None = None
    # fms: unset or "true" resumes from the latest checkpoint in output_dir (if any), "false"
    # starts afresh, anything else is a checkpoint path
    resume_from_checkpoint: str | None = None
    save_model_dir: str | None = None  # the final model is saved here too (trainer.save_model)
    trackers: list[str] = field(default_factory=lambda: ["file_logger"])
    training_logs_filename: str = "training_logs.jsonl"  # fms's file logger, in output_dir
    # distributed
    ddp_timeout: int = 1800  # seconds; the collective timeout
    # PEFT
    peft_method: str = "none"  # lora | none
    r: int = 8
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: list[str] | None = None  # None: peft's default for the architecture

    def validate(self, source: str = "arguments") -> SFTConfig:
        for name in ("model_name_or_path", "training_data_path", "output_dir"):
            if not getattr(self, name):
                raise ConfigError(f"{name} is required (set it in {source} or as --{name})")
        if self.peft_method not in PEFT_METHODS:
            what = {"pt": "prompt tuning", "alora": "activated LoRA"}.get(self.peft_method)
            raise ConfigError(
                f"peft_method {self.peft_method!r}"
                + (f" ({what}) is not implemented by this trainer" if what else " is unknown")
                + "; use lora or none (fms-hf-tuning itself runs pt and alora)"
            )
        for name, default in REFUSED_KEYS.items():
            value = getattr(self, name)
            if not is_default(value, default):
                raise ConfigError(
                    f"{name}={value!r} in {source} would change training and is not implemented"
                    f" by this trainer; remove it (fms's default is {default!r}) or run"
                    " fms-hf-tuning itself"
                    + (f" ({REFUSED_HINTS[name]})" if name in REFUSED_HINTS else "")
                )
        for name in self.trackers or []:
            if name != "file_logger":
                raise ConfigError(
                    f"tracker {name!r} (trackers in {source}) is not available in this trainer:"
                    " only file_logger, which writes training_logs.jsonl to output_dir"
                )
        if self.dataset_text_field and self.data_formatter_template:
            raise ConfigError(
                "dataset_text_field and data_formatter_template are mutually exclusive (as in"
                " fms): set one"
            )
        for name in ("save_strategy", "eval_strategy", "logging_strategy"):
            if getattr(self, name) not in ("no", "steps", "epoch"):
                raise ConfigError(f"{name} must be no, steps or epoch, not {getattr(self, name)!r}")
        if self.torch_dtype not in ("float32", "bfloat16", "float16", "auto"):
            raise ConfigError(
                f"torch_dtype must be float32, bfloat16, float16 or auto, not {self.torch_dtype!r}"
            )
        if self.data_formatter_template and not self.response_template:
            raise ConfigError(
                "data_formatter_template needs a response_template to mask the prompt"
            )
        if why := chat_config_problem(self):
            raise ConfigError(why)
        for name in (
            "max_seq_length",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "embedding_size_multiple_of",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.max_steps <= 0 and self.num_train_epochs <= 0:
            raise ConfigError("set max_steps > 0 or num_train_epochs > 0")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio must be in [0, 1), not {self.warmup_ratio}")
        if self.ddp_timeout < 1:
            raise ConfigError(
                f"ddp_timeout must be a positive number of seconds, not {self.ddp_timeout}"
            )
        return self

    @property
    def tokenizer_path(self) -> str:
        return self.tokenizer_name_or_path or self.model_name_or_path


# fms's keys that this trainer does not implement are fields too (any value; validate()
# refuses the REFUSED_KEYS ones away from fms's default), so a job file round-trips.
SFTConfig = dataclasses.make_dataclass(
    "SFTConfig",
    [(k, typing.Any, field(default=None)) for k in NO_OP_KEYS]
    + [(k, typing.Any, field(default=d)) for k, d in REFUSED_KEYS.items()],
    bases=(SFTConfig,),
)
SFTConfig.__module__ = __name__
FIELDS = {f.name: f for f in dataclasses.fields(SFTConfig)}
EXTRA_KEYS = set(NO_OP_KEYS) | set(REFUSED_KEYS)


def _base_type(name: str):
    """The plain type of a field: int, float, str, bool or list."""
    if name in EXTRA_KEYS:
        return typing.Any
    hint = typing.get_type_hints(SFTConfig)[name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_origin(hint) or hint


def _parse_bool(text: str) -> bool:
    low = str(text).strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def coerce(name: str, value, source: str):
    """Convert a value from a file or the command line to the field's type, or raise ConfigError."""
    if name not in FIELDS:
        raise ConfigError(f"unknown key {name!r} in {source}")
    if value is None:
        return None
    kind = _base_type(name)
    try:
        if kind is typing.Any:  # a key listed in NO_OP_KEYS / REFUSED_KEYS: kept as given
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return "true" if not value else (value[0] if len(value) == 1 else value)
            return value
        if name == "resume_from_checkpoint":
            if isinstance(value, bool):
                return "true" if value else "false"
            text = str(value).strip()
            return None if text.lower() in ("none", "") else text
        if name == "peft_method":
            return str(value).strip().lower()  # fms: type=str.lower
        if name == "add_special_tokens":  # tokens as typed: never split on commas
            return [value] if isinstance(value, str) else [str(v) for v in value]
        if name in UNESCAPED and isinstance(value, str):
            return value.encode("utf-8").decode("unicode_escape")  # as fms's DataArguments
        if isinstance(value, list) and kind is not list:  # a flag given once, as nargs
            if len(value) != 1:
                raise ValueError(f"expected one value, got {len(value)}: {value!r}")
            value = value[0]
        if kind is bool:
            return value if isinstance(value, bool) else _parse_bool(value)
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(f"not an integer: {value!r}")
            return int(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError(f"not a number: {value!r}")
            return float(value)
        if kind is list:
            if isinstance(value, str):
                value = [value]
            if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
                # fms: --target_modules q_proj v_proj; here also q_proj,v_proj
                return [p.strip() for v in value for p in v.split(",") if p.strip()]
            raise ValueError(f"not a list of strings: {value!r}")
        if not isinstance(value, str):
            raise ValueError(f"not a string: {value!r}")
        return value
    except ValueError as exc:
        raise ConfigError(f"bad value for {name!r} in {source}: {exc}") from None


def load_file(path: str | os.PathLike) -> dict:
    """Read a JSON or YAML job file into a dict of known, type-checked keys."""
    path = Path(path)
    text = read_or_refuse(path, lambda why: ConfigError(f"cannot read job file {path}: {why}"))
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text) if text.strip() else {}
        else:
            import yaml

            data = yaml.safe_load(text) or {}
    except Exception as exc:  # json.JSONDecodeError, yaml.YAMLError (not a ValueError)
        raise ConfigError(f"cannot parse job file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"job file {path} must hold a mapping of argument names, not {type(data).__name__}"
        )
    return {key: coerce(key, value, f"job file {path}") for key, value in data.items()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tuning.sft_trainer",
        description="SFT of a causal LM on the HF Trainer (fms-hf-tuning arguments).",
        argument_default=argparse.SUPPRESS,  # only flags actually given override the job file
        allow_abbrev=False,
    )
    parser.add_argument("--config", help=f"JSON or YAML job file (else ${CONFIG_ENV})")
    for name, f in FIELDS.items():
        kind = _base_type(name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if kind is typing.Any:
            why = NO_OP_KEYS.get(name) or "refused unless fms's default"
            parser.add_argument(f"--{name}", dest=name, nargs="*", help=f"fms key: {why}")
        elif kind is bool:  # fms (HfArgumentParser): a bare --flag means true
            parser.add_argument(
                f"--{name}",
                dest=name,
                nargs="?",
                const="true",
                metavar="BOOL",
                help=f"default: {default!r}",
            )
        elif kind is list:
            parser.add_argument(
                f"--{name}", dest=name, nargs="+", metavar="NAME", help=f"default: {default!r}"
            )
        else:
            meta = kind.__name__.upper()
            parser.add_argument(f"--{name}", dest=name, metavar=meta, help=f"default: {default!r}")
    return parser


def parse_args(argv: list[str] | None = None, environ: dict | None = None) -> SFTConfig:
    """Defaults < job file < command line. Raises ConfigError for anything refused."""
    environ = os.environ if environ is None else environ
    parser = build_parser()
    ns, extra = parser.parse_known_args(argv)
    if extra:
        raise ConfigError(f"unknown argument(s): {' '.join(extra)}")
    given = vars(ns)
    config_path = given.pop("config", None) or environ.get(CONFIG_ENV) or None
    values: dict = {}
    source = "arguments"
    if config_path:
        values.update(load_file(config_path))
        source = f"job file {config_path}"
    for name, raw in given.items():
        values[name] = coerce(name, raw, f"--{name}")
    return SFTConfig(**values).validate(source)
