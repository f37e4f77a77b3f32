"""fms-hf-tuning 3.2.2's own data preprocessing, run in the fms image (fms's `tuning` package
collides with ours by name, so this never runs in the project's interpreter).

    python tests/fms_side/preprocess.py OUT.json --json JOB.json        (in the fms image)
    python tests/fms_side/preprocess.py OUT.json -- --model_name_or_path M ...

Parses the job with fms's own parser (HfArgumentParser over fms's dataclasses: a JSON dict as
SFT_TRAINER_CONFIG_JSON_PATH gives it, or command-line flags), loads the tokenizer and model as
fms's train() does (AutoTokenizer use_fast/legacy, setup_tokenizer), runs process_dataargs,
trl's SFTTrainer._prepare_dataset (EOS, tokenization, truncation) on it, then fms's data
collator on each record alone, and writes every record's input_ids and labels as JSON.
"""

import dataclasses
import json
import sys
import warnings


def main(argv):
    out, rest = argv[0], argv[1:]
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer
    from tuning.data.setup_dataprocessor import process_dataargs
    from tuning.data.tokenizer_utils import setup_tokenizer

    from tuning.sft_trainer import get_parser, parse_arguments

    parser = get_parser()
    if rest[0] == "--json":
        with open(rest[1]) as fh:
            job = json.load(fh)
        parsed = parse_arguments(parser, job)
    else:
        sys.argv = ["sft_trainer.py", *rest[1:]]
        parsed = parse_arguments(parser, None)
    model_args, data_args, train_args = parsed[:3]

    tokenizer = AutoTokenizer.from_pretrained(
        model_args.tokenizer_name_or_path or model_args.model_name_or_path,
        use_fast=True,
        legacy=True,
    )
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
    added = setup_tokenizer(tokenizer, data_args, model_args, model)
    train_ds, _, text_field, collator, max_len, ds_kwargs = process_dataargs(
        data_args, tokenizer, train_args
    )
    names = [f.name for f in dataclasses.fields(SFTConfig) if f.init]
    kwargs = {k: v for k, v in vars(train_args).items() if k in names}
    kwargs["max_seq_length"] = max_len
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = SFTConfig(**kwargs, dataset_text_field=text_field, dataset_kwargs=ds_kwargs)
        ds = SFTTrainer._prepare_dataset(None, train_ds, tokenizer, cfg, False, None, "train")
    keep = ("input_ids", "labels")  # trl's signature columns that these shapes have
    rows, not_found = [], 0
    for example in ds:
        feature = {k: example[k] for k in keep if k in example}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batch = collator([feature])
        not_found += any("Could not find response key" in str(w.message) for w in caught)
        rows.append({k: batch[k][0].tolist() for k in keep})
    result = {
        "rows": rows,
        "not_found": not_found,
        "collator": type(collator).__name__,
        "max_seq_length": max_len,
        "response_template": data_args.response_template,
        "data_formatter_template": data_args.data_formatter_template,
        "added_tokens": added,
        "special_tokens_map": tokenizer.special_tokens_map,
    }
    with open(out, "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main(sys.argv[1:])
