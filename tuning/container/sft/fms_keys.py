"""fms-hf-tuning keys this trainer lacks: accepted as no-ops, or refused unless at fms's default."""

from __future__ import annotations

# fms keys that change nothing in this trainer: accepted with any value, and why.
NO_OP_KEYS = {
    "use_flash_attn": "attention kernel only; the model's default attention is used",
    "flash_attn_implementation": "attention kernel only (with use_flash_attn)",
    "include_tokens_per_second": "an HF speed metric; tokens/s is in train_summary.json",
    "include_num_input_tokens_seen": "an HF counter; tokens are in the step metrics",
    "log_level": "logging verbosity",
    "log_level_replica": "logging verbosity",
    "logging_dir": "TensorBoard directory; no reporter runs here",
    "logging_first_step": "HF log lines only",
    "logging_nan_inf_filter": "HF log lines only",
    "disable_tqdm": "progress bar only",
    "run_name": "a tracker's run name",
    "experiment": "a tracker's experiment name",
    "exp_metadata": "metadata for a tracker",
    "run_uri_export_path": "where a tracker writes its run URI",
    "cache_dir": "download cache; models and data are local directories here",
    "overwrite_output_dir": "not read by the HF Trainer",
    "do_train": "not read by the HF Trainer",
    "do_eval": "not read by the HF Trainer",
    "do_predict": "not read by the HF Trainer",
    "skip_memory_metrics": "HF memory metrics only",
    "save_safetensors": "file format of checkpoints (always safetensors here)",
    "dataloader_pin_memory": "host-to-device copy speed only",
    "dataloader_persistent_workers": "worker reuse only (no loader workers here)",
    "remove_unused_columns": "this trainer's collator makes exactly the model's columns",
    "local_rank": "set by the launcher",
    "num_train_dataset_shards": "only with do_dataprocessing_only (refused)",
    "num_eval_dataset_shards": "only with do_dataprocessing_only (refused)",
    "prompt_tuning_init": "only with peft_method pt (refused)",
    "num_virtual_tokens": "only with peft_method pt (refused)",
    "prompt_tuning_init_text": "only with peft_method pt (refused)",
    "aim_experiment": "aim tracker only (refused)",
    "aim_repo": "aim tracker only (refused)",
    "aim_remote_server_ip": "aim tracker only (refused)",
    "aim_remote_server_port": "aim tracker only (refused)",
    "aim_url": "aim tracker only (refused)",
    "mlflow_experiment": "mlflow tracker only (refused)",
    "mlflow_tracking_uri": "mlflow tracker only (refused)",
    "clearml_project": "clearml tracker only (refused)",
    "clearml_task": "clearml tracker only (refused)",
    "scanner_output_filename": "hf_resource_scanner tracker only (refused)",
}

# fms keys (and HF TrainingArguments fms passes through) that would change training and that
# this trainer does not implement: fms's default -> accepted; anything else -> refused.
REFUSED_KEYS = {
    # fms ModelArguments / DataArguments
    "dataset_image_field": None,
    "data_config_path": None,
    "do_dataprocessing_only": False,
    # fms TrainingArguments
    "packing": False,
    "enable_reduce_loss_sum": False,
    # fms extras: quantization, acceleration plugins, trainer controller, aLoRA
    "quantization_method": "none",
    "dequantize": True,
    "trainer_controller_config_file": None,
    "alora_invocation_string": None,
    "padding_free": None,
    "multipack": None,
    "fast_moe": None,
    "fused_lora": None,
    "fast_kernels": None,
    "auto_gptq": None,
    "bitsandbytes": None,
    # HF TrainingArguments
    "bf16": False,
    "fp16": False,
    "tf32": None,
    "torch_compile": False,
    "deepspeed": None,
    "fsdp": "",
    "fsdp_config": None,
    "gradient_checkpointing_kwargs": None,
    "group_by_length": False,
    "auto_find_batch_size": False,
    "ignore_data_skip": False,
    "neftune_noise_alpha": None,
    "label_smoothing_factor": 0.0,
    "eval_on_start": False,
    "push_to_hub": False,
    "report_to": "none",
    "use_cpu": False,
    # peft LoraConfig (fms's LoraConfig extends it)
    "bias": "none",
    "use_rslora": False,
    "use_dora": False,
    "fan_in_fan_out": False,
    "modules_to_save": None,
    "exclude_modules": None,
    "layers_to_transform": None,
    "layers_pattern": None,
    "trainable_token_indices": None,
    "init_lora_weights": True,
}

# What a user of a refused key can do here instead.
REFUSED_HINTS = {
    "data_config_path": "chat records train here through fms's other route: instruction_template"
    " and response_template, with the tokenizer's chat template or chat_template",
}


def _norm(value):
    """A value from a file or a flag, compared loosely with a default: 'false' == False,
    'None' == '' == [] == None, '1.0' == 1."""
    if isinstance(value, list | tuple):
        return None if not value else (_norm(value[0]) if len(value) == 1 else list(value))
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("", "none", "null"):
            return None
        if low in ("true", "false"):
            return low == "true"
        try:
            return float(low)
        except ValueError:
            return low
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def is_default(value, default) -> bool:
    """Whether `value` is fms's `default`, compared loosely (_norm)."""
    a, b = _norm(value), _norm(default)
    if b in (None, False):
        return a in (None, False)
    return a == b
