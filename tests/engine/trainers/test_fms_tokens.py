"""Our tokenizer set-up (tuning/container/sft/special_tokens.py) against fms-hf-tuning 3.2.2's own,
run in its image (tests/support/entries/fms_setup_probe.py calls fms's setup_tokenizer) on the same
model directories: the same special tokens with the same ids, the same length, the same embedding
rows, the old rows untouched and the new ones at the mean. One container run covers every case.

Where fms leaves rows a tokenizer already had past the model's to transformers' mean_resizing
(the mean plus noise scaled by 1e-9), ours are the mean exactly: those rows are compared to
1e-5, every other row exactly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from support.paths import ENTRIES
from support.tokenizer_models import (
    added_tokens,
    job_config,
    no_pad,
    portable,
    sentencepiece_llama,
    variant,
)
from tuning.container.sft.config import ConfigError
from tuning.container.sft.fms_tokenizer import NAMES, load
from tuning.container.sft.special_tokens import set_up

pytestmark = pytest.mark.docker
PROBE = ENTRIES / "fms_setup_probe.py"


def cases(root: Path, tiny: Path) -> list[dict]:
    base = portable(variant(tiny, root / "tiny"))
    nopad = no_pad(root / "no_pad")
    return [
        {"name": "pad_present", "model": base},
        {"name": "no_pad", "model": nopad},
        {
            "name": "no_pad_gpt2_tied_x128",
            "model": no_pad(root / "gpt2", "gpt2"),
            "embedding_size_multiple_of": 128,
        },
        {"name": "pad_is_eos", "model": variant(base, root / "pad_eos", pad_token="</s>")},
        {
            "name": "llama_class",
            "model": variant(nopad, root / "llama", tokenizer_class="LlamaTokenizer"),
        },
        {
            "name": "llama_by_model_type",
            "model": variant(nopad, root / "by_type", tokenizer_class=None),
        },
        {"name": "sentencepiece_llama", "model": sentencepiece_llama(root / "sp")},
        {
            "name": "neox_class",
            "model": variant(
                base, root / "neox", pad_token="<unk>", tokenizer_class="GPTNeoXTokenizer"
            ),
        },
        {
            "name": "neox_class_no_pad",
            "model": variant(nopad, root / "neox_nopad", tokenizer_class="GPTNeoXTokenizer"),
        },
        {
            "name": "eos_and_pad_are_PAD",
            "model": variant(base, root / "eos_pad", pad_token="<PAD>", eos_token="<PAD>"),
        },
        {
            "name": "added_tokens_x64",
            "model": added_tokens(root / "added"),
            "embedding_size_multiple_of": 64,
        },
        {
            "name": "job_tokens_and_chat_template",
            "model": base,
            "add_special_tokens": ["<|a|>", "<|b|>"],
            "chat_template": "{{ messages }}",
        },
        {"name": "separate_tokenizer", "model": base, "tokenizer_name_or_path": base},
        {"name": "separate_tokenizer_no_pad", "model": base, "tokenizer_name_or_path": nopad},
    ]


# typed special tokens, the EOS as text, leading spaces, tabs, unicode: where loads differ
TEXTS = [
    "ant cat\n\n## Label: teal</s>",
    "<|user|>\nyak emu<|assistant|>\nnavy<|end_of_text|>",
    "  two spaces\tand a tab\n\nÜnïcödé 😀",
    "<PAD><pad><unk><s><|endoftext|>",
]


def fms_probe(image: str, case_list: list[dict], tmp_path: Path) -> dict:
    """fms's set-up of every case, in its image, with no network."""
    out = tmp_path / "probe-out"
    out.mkdir()
    for path in [tmp_path, *tmp_path.rglob("*")]:  # the image's user (uid 1000) reads these
        path.chmod(0o755 if path.is_dir() else 0o644)
    out.chmod(0o777)  # and writes here
    plain = [
        {k: str(v) if isinstance(v, Path) else v for k, v in c.items()} | {"texts": TEXTS}
        for c in case_list
    ]
    (tmp_path / "cases.json").write_text(json.dumps(plain))
    mounts = {str(tmp_path): str(tmp_path), str(PROBE): "/probe/fms_setup_probe.py"}
    cmd = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python"]
    for src, dst in mounts.items():
        cmd += ["-v", f"{src}:{dst}"]
    cmd += [image, "/probe/fms_setup_probe.py", str(tmp_path / "cases.json"), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"fms probe failed:\n{proc.stdout}{proc.stderr[-4000:]}"
    return json.loads((out / "report.json").read_text())


def ours(case: dict) -> tuple[dict, object, object]:
    from transformers import AutoModelForCausalLM

    keys = (
        "tokenizer_name_or_path",
        "embedding_size_multiple_of",
        "chat_template",
        "add_special_tokens",
    )
    cfg = job_config(case["model"], **{k: case[k] for k in keys if k in case})
    tokenizer = load(cfg.tokenizer_path)
    model = AutoModelForCausalLM.from_pretrained(cfg.model_name_or_path)
    return set_up(tokenizer, model, cfg), tokenizer, model


def test_tokenizer_set_up_matches_fms(fms_image, tiny_model, tmp_path):
    case_list = cases(tmp_path, tiny_model)
    theirs = fms_probe(fms_image, case_list, tmp_path)
    for case in case_list:
        name, fms = case["name"], theirs[case["name"]]
        if fms["pad_error"]:  # fms cannot pad: refused here before training
            with pytest.raises(ConfigError, match="no pad token"):
                ours(case)
            print(
                f"{name}: fms {fms['class']} fails at its first batch ({fms['pad_error'][:60]}"
                "...); refused here"
            )
            continue
        record, tokenizer, model = ours(case)
        got = {n: getattr(tokenizer, n) for n in NAMES}
        assert got == fms["special"], f"{name}: special tokens ours {got} fms {fms['special']}"
        ids = {n: getattr(tokenizer, n + "_id") for n in NAMES}
        assert ids == fms["ids"], f"{name}: ids ours {ids} fms {fms['ids']}"
        assert len(tokenizer) == fms["length"], name
        assert tokenizer.padding_side == fms["padding_side"], name
        tokens = [tokenizer(text)["input_ids"] for text in TEXTS]
        assert tokens == fms["tokens"], f"{name}: token ids ours {tokens} fms {fms['tokens']}"
        assert tokenizer.chat_template == fms["chat_template"], name
        rows, size = record["embedding_rows"]
        assert size == fms["result"]["new_embedding_size"], name
        fms_new = fms["result"]["num_new_tokens"]
        weights = torch.load(tmp_path / "probe-out" / f"{name}.pt")
        mine = [
            m.weight.detach() for m in (model.get_input_embeddings(), model.get_output_embeddings())
        ]
        for which, (a, b) in enumerate(zip(mine, weights, strict=True)):
            where = f"{name}, {'output' if which else 'input'} embeddings"
            assert a.shape == b.shape, f"{where}: ours {tuple(a.shape)} fms {tuple(b.shape)}"
            kept = min(rows, size - fms_new)  # rows fms neither adds nor sets
            assert torch.equal(a[:kept], b[:kept]), f"{where}: rows 0..{kept - 1} differ"
            assert torch.allclose(a[kept:], b[kept:], atol=1e-5, rtol=0), f"{where}: new rows"
        assert (mine[0].data_ptr() == mine[1].data_ptr()) == fms["tied"], name
        print(
            f"{name}: fms {fms['class']}, {fms['length']} tokens, rows {rows} -> {size},"
            f" set {record['set']}: identical"
        )
