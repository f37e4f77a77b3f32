"""Fine-tune a causal language model on JSON Lines with the Hugging Face Trainer.

    accelerate launch train_sft.py --model_name_or_path MODEL --train_file data.jsonl \
        --output_dir out --max_steps 100 --save_steps 20 --learning_rate 1e-4

Each record's `fields` (default: input, output) are joined into one text; the model learns all
of it. If the output dir holds a checkpoint, training resumes from the newest one.

A user's script as they write it: it knows nothing of the harness (the tests run it with
make up/fault SRC=tests/user_scripts ENTRY=train_sft.py ARGS=...).
"""

import os
from dataclasses import dataclass

from datasets import load_dataset
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint


@dataclass
class ScriptArguments:
    model_name_or_path: str
    train_file: str
    fields: str = "input,output"
    max_seq_length: int = 64


def main():
    parser = HfArgumentParser((ScriptArguments, TrainingArguments))
    script, training = parser.parse_args_into_dataclasses()
    set_seed(training.seed)

    tokenizer = AutoTokenizer.from_pretrained(script.model_name_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(script.model_name_or_path)

    fields = script.fields.split(",")
    raw = load_dataset("json", data_files=script.train_file, split="train")

    def tokenize(batch):
        texts = ["".join(parts) for parts in zip(*(batch[f] for f in fields), strict=True)]
        return tokenizer(texts, truncation=True, max_length=script.max_seq_length)

    with training.main_process_first(desc="tokenize"):
        data = raw.map(tokenize, batched=True, remove_columns=raw.column_names)

    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=data,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        processing_class=tokenizer,
    )
    checkpoint = training.resume_from_checkpoint
    if checkpoint is None and os.path.isdir(training.output_dir):
        checkpoint = get_last_checkpoint(training.output_dir)
    if checkpoint:
        print(f"train_sft: resuming from {checkpoint}", flush=True)
    trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model()


if __name__ == "__main__":
    main()
