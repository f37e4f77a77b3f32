"""Checks a run's inputs on the host before anything starts, so a mistake costs a second and
a clear message instead of a container that dies in its log.

The job and data are checked by the trainer's own pure-Python code (tuning.container.sft.config,
tuning.container.sft.data: no torch), so the host and the ranks can never disagree about what is
valid.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tuning.container.sft.chat import require_template
from tuning.container.sft.config import ConfigError, SFTConfig
from tuning.container.sft.config_args import coerce
from tuning.container.sft.data import DataError, load_examples
from tuning.container.sft.records import describe, gc_paused, reader_missing, table_columns
from tuning.container.sft.shapes import check_columns, formatting
from tuning.harness.errors import HarnessError
from tuning.harness.flags import trainers

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
CHECK_ACCELERATE = (
    "import sys\n"
    "from accelerate.commands.config.config_args import load_config_from_file\n"
    "try:\n    load_config_from_file(sys.argv[1])\n"
    "except Exception as e:\n    print(e); sys.exit(1)\n"
)


def check_job(job: dict, source: str) -> SFTConfig:
    try:
        values = {key: coerce(key, value, source) for key, value in job.items()}
        return SFTConfig(**values).validate(source)
    except ConfigError as e:
        raise HarnessError(f"{e}; fix the job file (JOB=...) or its variable") from None


def check_model(path: str | None, said: str = "MODEL") -> None:
    """A model directory on this machine; `said` is what named it (MODEL, the job file)."""
    if not path:
        return
    model = Path(path)
    if not (model / "config.json").is_file():
        raise HarnessError(f"{said}={path} has no config.json: not a Hugging Face model dir")
    if not any((model / name).is_file() for name in TOKENIZER_FILES):
        raise HarnessError(
            f"{said}={path} has no tokenizer ({', '.join(TOKENIZER_FILES)}); save one with "
            "tokenizer.save_pretrained(MODEL), or set tokenizer_name_or_path in the job"
        )


def check_data(path: str | None, cfg: SFTConfig, model: str | None = None) -> None:
    """Every record where this environment reads them (JSON always, Parquet and Arrow with
    pyarrow, text and directories with datasets); else a table's columns from its schema
    where pyarrow reads it, and the rest is the trainer's to check. Chat records and a `model`
    directory on this machine: its tokenizer must have a chat template (or the job one)."""
    if not path:
        return
    fmt = formatting(cfg)
    try:
        missing = reader_missing(path)
        if missing is None:
            with gc_paused():
                examples = load_examples(path, **fmt)
            if examples[0].conversation is not None and not cfg.chat_template:
                check_chat_template(model, cfg.tokenizer_name_or_path)
            return
        columns = table_columns(path)
        if columns is not None:
            check_columns(path, columns, **fmt)
        checked = "its columns checked" if columns is not None else "not read here"
        print(
            f"harness: note: DATA={path}: {describe(path)}, {checked} (no `{missing}` in this"
            " environment); the trainer checks its records before training"
        )
    except DataError as e:
        raise HarnessError(f"DATA: {e}") from None


CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")  # transformers saves these


def check_chat_template(model: str | None, tokenizer_path: str | None) -> None:
    """The tokenizer in a model directory on this machine has a chat template where
    transformers looks for one: chat_template.jinja, chat_template.json, or the
    chat_template key of tokenizer_config.json. A model in the image, or a tokenizer named
    apart, is the rank's to check (tuning/container/sft/chat.py, the same message)."""
    if not model or tokenizer_path:
        return
    folder = Path(model)
    if any((folder / name).is_file() for name in CHAT_TEMPLATE_FILES):
        return
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        config = {}
    if isinstance(config, dict) and config.get("chat_template"):
        return
    try:
        require_template(None, model)
    except DataError as e:
        raise HarnessError(f"DATA: {e}") from None


def check_world_size(path: Path, world_size: int) -> None:
    """A config's num_processes is the world size it was written for. The launcher passes
    the run's own (GPUS, NPROC), so a different one would be overridden in silence: refused.
    1 is the placeholder accelerate and fms-hf-tuning write ("overridden"), so it passes."""
    data = trainers.load_job(path, "CONFIG")
    n = data.get("num_processes")
    if isinstance(n, int) and n not in (-1, 1, world_size):
        raise HarnessError(
            f"CONFIG={path} says num_processes: {n}, but this run has {world_size} rank(s) "
            f"(GPUS/NPROC). Set GPUS or NPROC to {n}, or num_processes to {world_size} (or 1, "
            "which the launcher overrides)"
        )


def check_accelerate_config(path: Path, image: str | None) -> None:
    """Run accelerate's own loader on a user's config (unknown keys raise there): in the
    image, or in this environment (LAYOUT=host, and every dry run: no container starts).
    An environment without accelerate (the harness-only venv) says so and skips it."""
    if not image and importlib.util.find_spec("accelerate") is None:
        print(
            f"harness: note: CONFIG={path} not loaded by accelerate here: no accelerate in "
            "this environment (`make .venv/.train`); a real run loads it in the image"
        )
        return
    if image:
        cmd = [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "python",
            "-v",
            f"{path.resolve()}:/cfg.yaml:ro",
            image,
            "-c",
            CHECK_ACCELERATE,
            "/cfg.yaml",
        ]
    else:
        cmd = [sys.executable, "-c", CHECK_ACCELERATE, str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        lines = out.stdout.strip().splitlines() or out.stderr.strip().splitlines()[-1:]
        why = lines[0] if lines else f"exit code {out.returncode}"
        raise HarnessError(f"CONFIG={path}: accelerate refuses it: {why}")


def check_runs_dir(root: Path, create: bool = True) -> None:
    """RUNS can hold a run; `create` False (a dry run): checked without writing anything, on
    the nearest folder that exists (it would make the rest)."""
    if not create:
        there = next((p for p in (root, *root.parents) if p.exists()), Path("/"))
        if there.is_dir() and os.access(there, os.W_OK | os.X_OK):
            return
        raise HarnessError(
            f"runs directory {root} is not writable ({there} is not a writable folder); make "
            "it writable or point RUNS=<dir> at one that is"
        )
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as e:
        raise HarnessError(
            f"runs directory {root} is not writable ({e.strerror}); make it writable or point "
            "RUNS=<dir> at one that is"
        ) from None
