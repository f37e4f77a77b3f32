"""Our trainer's parts (tuning/container/sft_trainer.py is its entry): the job's config, the data
readers and shapes, tokenizers and chat records as fms-hf-tuning treats them, metrics, atomic
saves and the fault hooks."""
