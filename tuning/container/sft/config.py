"""The trainer's whole configuration: one dataclass, read from a job file and the command line
(config_args.py) and checked here, in one place (`validate`).

Precedence, lowest first: the defaults below, the job file (``--config FILE`` or the file named
by ``SFT_TRAINER_CONFIG_JSON_PATH``; ``--config`` wins when both are given), command-line flags.
Argument names, types and defaults are fms-hf-tuning 3.2.2's (its HfArgumentParser over
ModelArguments, DataArguments, TrainingArguments, LoraConfig, trackers): bare ``--flag`` for a
boolean, ``--target_modules q_proj v_proj``, ``peft_method LORA``, ``\\n`` typed in a template
unescaped as fms does. fms keys not implemented here are in tuning/container/sft/fms_keys.py:
NO_OP_KEYS (accepted, changing nothing) or REFUSED_KEYS (refused by name unless at fms's default).
Pure Python: no torch import here."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field

from tuning.container.sft.chat import config_problem as chat_config_problem
from tuning.container.sft.fms_keys import NO_OP_KEYS, REFUSED_HINTS, REFUSED_KEYS, is_default

PEFT_METHODS = ("lora", "none")


class ConfigError(ValueError):
    """A job file or argument the trainer refuses (reported without a traceback, exit 2)."""


@dataclass
class SFTConfig:
    # model
    model_name_or_path: str | None = None
    tokenizer_name_or_path: str | None = None  # defaults to model_name_or_path
    # fms's tokenizer set-up (tuning/container/sft/special_tokens.py): embedding rows rounded up to
    # a multiple of this; more special tokens to add
    embedding_size_multiple_of: int = 1
    add_special_tokens: list[str] | None = None
    torch_dtype: str = "float32"  # float32 | bfloat16 | float16 | auto
    # data
    training_data_path: str | None = None
    validation_data_path: str | None = None
    dataset_text_field: str | None = None
    response_template: str | None = None
    data_formatter_template: str | None = None  # "### Input: {{input}} \n\n## Label: {{output}}"
    # chat records (tuning/container/sft/chat.py): fms's instruction and response templates route
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
