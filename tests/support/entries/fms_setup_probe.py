"""Run inside fms-hf-tuning 3.2.2's image (tests/engine/trainers/test_fms_tokens.py): fms's own
tokenizer set-up (tuning.data.tokenizer_utils.setup_tokenizer, with the model and tokenizer loaded
as its sft_trainer.train loads them) on each case, and what it left: the special tokens and their
ids, the tokenizer's length, fms's returned dict, whether the tokenizer can pad, and the embedding
weights (OUT/<case>.pt), and the token ids of the case's texts.

Usage: python fms_setup_probe.py CASES.json OUT   (CASES: [{"name", "model", ...job keys}])
Standard library, torch, transformers and fms only: it never imports the harness.
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from tuning.config import configs  # fms's package in its image
from tuning.data.tokenizer_utils import setup_tokenizer

NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def probe(case: dict, out: str) -> dict:
    model = AutoModelForCausalLM.from_pretrained(case["model"], use_cache=False)
    tokenizer = AutoTokenizer.from_pretrained(
        case.get("tokenizer_name_or_path") or case["model"], use_fast=True, legacy=True
    )
    model_args = configs.ModelArguments(
        model_name_or_path=case["model"],
        tokenizer_name_or_path=case.get("tokenizer_name_or_path"),
        embedding_size_multiple_of=case.get("embedding_size_multiple_of", 1),
    )
    data_args = configs.DataArguments(
        add_special_tokens=case.get("add_special_tokens"), chat_template=case.get("chat_template")
    )
    result = setup_tokenizer(tokenizer, data_args, model_args, model)
    try:
        tokenizer.pad([{"input_ids": [5, 6]}, {"input_ids": [5]}])
        pad_error = None
    except ValueError as exc:
        pad_error = str(exc)
    weights = [
        m.weight.detach() for m in (model.get_input_embeddings(), model.get_output_embeddings())
    ]
    torch.save([w.clone() for w in weights], f"{out}/{case['name']}.pt")
    return {
        "class": type(tokenizer).__name__,
        "special": {n: getattr(tokenizer, n) for n in NAMES},
        "ids": {n: getattr(tokenizer, n + "_id") for n in NAMES},
        "length": len(tokenizer),
        "padding_side": tokenizer.padding_side,
        "result": result,
        "pad_error": pad_error,
        "chat_template": tokenizer.chat_template,
        "tied": weights[0].data_ptr() == weights[1].data_ptr(),
        "tokens": [tokenizer(text)["input_ids"] for text in case.get("texts", [])],
    }


if __name__ == "__main__":
    cases = json.load(open(sys.argv[1]))
    report = {case["name"]: probe(case, sys.argv[2]) for case in cases}
    with open(f"{sys.argv[2]}/report.json", "w") as fh:
        json.dump(report, fh, indent=1)
    print(f"probed {len(report)} case(s)")
