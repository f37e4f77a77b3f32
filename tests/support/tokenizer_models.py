"""Tiny models whose tokenizers are shaped like the ones fms-hf-tuning users bring, built
offline (tests and the hand-run tests/support/fms_testdata.py):

- ``no_pad``: a Llama 3 / Mistral-shaped tokenizer: no pad token (and no unk), its own bos/eos;
- ``added_tokens``: the tiny tokenizer with special tokens added past the model's embedding rows
  (a chat tokenizer on a base checkpoint: 4 more ids than the model has rows).

Saved so fms's transformers (4.55) loads them too: transformers 5 writes tokenizer_class
"TokenizersBackend", which 4.55 does not know, and the added special tokens as a list named
extra_special_tokens, which 4.55 reads as a mapping; "PreTrainedTokenizerFast" and
additional_special_tokens load the same tokenizer.json (every id unchanged) in both.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

CHAT_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]
# The chat template of fms's tests/test_sft_trainer.py
# (test_run_chat_style_ft_dataset_conversation_field), over those tokens
CHAT_TEMPLATE = (
    "{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{{- '<|system|>\\n' + message['content'] + '\\n' }}{%- elif message['role'] == 'user' %}"
    "{{- '<|user|>\\n' + message['content'] + '\\n' }}{%- elif message['role'] == 'assistant' %}"
    "{%- if not loop.last %}{{- '<|assistant|>\\n'  + message['content'] + eos_token + '\\n' }}"
    "{%- else %}{{- '<|assistant|>\\n'  + message['content'] + eos_token }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
)
LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}


def portable(out: Path, **config) -> Path:
    """tokenizer_config.json loadable by transformers 4.55 too; files readable by the ranks'
    user (save_pretrained writes 0600)."""
    path = out / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg.update({"tokenizer_class": "PreTrainedTokenizerFast", **config})
    if isinstance(cfg.get("extra_special_tokens"), list):  # 4.55 reads a list under this name
        cfg["additional_special_tokens"] = cfg.pop("extra_special_tokens")
    path.write_text(json.dumps(cfg, indent=1))
    for f in out.iterdir():
        f.chmod(0o644)
    return out


def _save(out: Path, tokenizer, rows: int, arch: str = "llama", seed: int = 0) -> Path:
    import torch
    from transformers import AutoModelForCausalLM

    from tuning.container.tiny_model import build_config

    config = build_config(arch, tokenizer)
    config.vocab_size = rows
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return portable(out)


def no_pad(out: Path, arch: str = "llama") -> Path:
    """Llama 3's shape: byte-level BPE, bos <|begin_of_text|>, eos <|end_of_text|>, no pad, no
    unk; the model has one row per token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from tuning.container.demo_data import corpus

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=list(LLAMA3.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=512, **LLAMA3)
    return _save(Path(out), tokenizer, len(tokenizer), arch)


def sentencepiece_llama(out: Path) -> Path:
    """Llama 2 / Mistral's shape: a Metaspace BPE with byte fallback whose tokenizer.json adds
    the BOS, tokenizer_class LlamaTokenizer, no pad: the class fms gives <s> </s> <unk> <pad>
    and that transformers 5 rebuilds (and tokenizes differently) where 4.55 does not."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        normalizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    from tuning.container.demo_data import corpus

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    # Llama 2's tokenizer.json: the spaces made "▁" by a normalizer, no pre-tokenizer
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=[f"<0x{i:02X}>" for i in range(256)],
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    # normalized, as TinyLlama's are: fms's tokenizers (0.21) then reads a '</s>' typed in a
    # text as characters even after fms re-adds it as the EOS
    tok.add_special_tokens(
        [AddedToken(t, normalized=True, special=True) for t in ("<unk>", "<s>", "</s>")]
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=512,
    )
    _save(Path(out), tokenizer, len(tokenizer))
    return variant_in_place(
        Path(out),
        tokenizer_class="LlamaTokenizer",
        add_bos_token=True,
        add_eos_token=False,
        legacy=True,
    )


def variant_in_place(out: Path, **tokenizer_config) -> Path:
    path = out / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(tokenizer_config)
    path.write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}, indent=1))
    return out


def variant(src: Path, out: Path, **tokenizer_config) -> Path:
    """A copy of a model directory with tokenizer_config.json keys changed (None: removed)."""
    shutil.copytree(src, out)
    return variant_in_place(out, **tokenizer_config)


def added_tokens(out: Path, tokens: list[str] = CHAT_TOKENS) -> Path:
    """The tiny tokenizer plus `tokens` as special tokens; the model keeps the base rows."""
    from tuning.container.demo_data import corpus
    from tuning.container.tiny_model import build_tokenizer

    tokenizer = build_tokenizer(corpus())
    rows = len(tokenizer)
    tokenizer.add_special_tokens({"additional_special_tokens": list(tokens)})
    return _save(Path(out), tokenizer, rows)


def build_models(tmp_path_factory) -> dict:
    """The no_pad and added_tokens models, for a test module's fixture."""
    root = tmp_path_factory.mktemp("token-models")
    return {"no_pad": no_pad(root / "no_pad"), "added": added_tokens(root / "added")}


def job_config(model: Path, **job):
    """A parsed job on `model` (training data and output never read), with `job`'s keys."""
    from tuning.container.sft.config_args import parse_args

    args = ["--model_name_or_path", str(model), "--training_data_path", "d", "--output_dir", "o"]
    for key, value in job.items():
        args += [f"--{key}", *(value if isinstance(value, list) else [str(value)])]
    return parse_args(args, environ={})
