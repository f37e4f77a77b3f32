"""A job's configuration read: the job file (``--config FILE``, else the file named by
``SFT_TRAINER_CONFIG_JSON_PATH``) under the command line, each value typed as fms-hf-tuning
3.2.2's HfArgumentParser types it (config.py: the fields and their checks). Pure Python: no
torch import here."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import types
import typing
from pathlib import Path

from tuning.container.sft.config import EXTRA_KEYS, FIELDS, ConfigError, SFTConfig
from tuning.container.sft.files import read_or_refuse
from tuning.container.sft.fms_keys import NO_OP_KEYS

CONFIG_ENV = "SFT_TRAINER_CONFIG_JSON_PATH"
# fms unescapes these (DataArguments.__post_init__): "\\n" typed in a flag or a JSON is a newline
UNESCAPED = (
    "data_formatter_template",
    "response_template",
    "instruction_template",
    "chat_template",
)


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
