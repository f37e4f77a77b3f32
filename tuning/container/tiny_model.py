"""A tiny, randomly initialised causal LM and a fast tokenizer, built offline.

``python -m tuning.container.tiny_model --out DIR [--arch llama|gpt2|granite|mistral] [--seed S]
[--size tiny|1b]``

The model (2 layers, hidden 64, dropout 0) is initialised from a seeded config, and the BPE
tokenizer is trained on the demo data's corpus (tuning.container.demo_data.corpus), so the directory
loads with AutoModelForCausalLM / AutoTokenizer under HF_HUB_OFFLINE=1.

``--size 1b`` (llama only) builds a 1B-class model for throughput checks instead: TinyLlama
1.1B's shape (``LLAMA_1B``: 22 layers, hidden 2048, MLP 5632, 32 heads, 4 KV heads, vocab 32000,
untied embeddings, 2048 positions; 1,100,048,384 parameters), random, saved in bfloat16, beside
the same tiny tokenizer (its ids are a subset of the 32000 rows, so every lookup is valid and the
output layer costs what a real 32000-token vocabulary costs) with model_max_length 2048.
"""

from __future__ import annotations

from pathlib import Path

from tuning.container.demo_data import cli

ARCHS = ("llama", "gpt2", "granite", "mistral")
SPECIAL = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
VOCAB_SIZE = 384
SIZES = ("tiny", "1b")
# TinyLlama-1.1B's architecture (a 1B-class Llama whose embeddings are not tied, so torchtitan's
# "non-embedding parameters" count the output layer unambiguously).
LLAMA_1B = dict(
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=22,
    num_attention_heads=32,
    num_key_value_heads=4,
    max_position_embeddings=2048,
    vocab_size=32000,
    rms_norm_eps=1e-5,
    attention_dropout=0.0,
    tie_word_embeddings=False,
)


def build_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE, model_max_length: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=SPECIAL["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, model_max_length=model_max_length, **SPECIAL
    )


def build_config(arch: str, tokenizer, layers: int = 2, hidden: int = 64):
    from transformers import AutoConfig

    ids = {
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if arch == "gpt2":
        return AutoConfig.for_model(
            "gpt2",
            n_embd=hidden,
            n_layer=layers,
            n_head=4,
            n_positions=512,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            **ids,
        )
    common = dict(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        attention_dropout=0.0,
        tie_word_embeddings=False,
        **ids,
    )
    if arch == "mistral":
        common["sliding_window"] = None
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
    return AutoConfig.for_model(arch, **common)


def build_config_1b(tokenizer):
    """The 1B-class llama config (LLAMA_1B) with the tokenizer's special-token ids."""
    from transformers import AutoConfig

    if len(tokenizer) > LLAMA_1B["vocab_size"]:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens, more than the model's rows")
    ids = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    return AutoConfig.for_model("llama", **LLAMA_1B, **ids)


def build(out: str | Path, arch: str = "llama", seed: int = 0, size: str = "tiny") -> Path:
    import torch
    from transformers import AutoModelForCausalLM

    from tuning.container.demo_data import corpus

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
    if size == "1b" and arch != "llama":
        raise ValueError("--size 1b is a llama model; use --arch llama")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if size == "1b":
        tokenizer = build_tokenizer(corpus(), model_max_length=LLAMA_1B["max_position_embeddings"])
        config, dtype = build_config_1b(tokenizer), torch.bfloat16
    else:
        tokenizer = build_tokenizer(corpus())
        config, dtype = build_config(arch, tokenizer), torch.float32
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    options = {
        "--out": dict(required=True, help="directory to write the model and tokenizer to"),
        "--arch": dict(choices=ARCHS, default="llama"),
        "--seed": dict(type=int, default=0),
        "--size": dict(choices=SIZES, default="tiny", help="tiny (default) or 1b (llama only)"),
    }

    def run(a):
        return f"wrote a {a.size} {a.arch} model to {build(a.out, a.arch, a.seed, a.size)}"

    return cli(argv, "tuning.container.tiny_model", __doc__, options, run)


if __name__ == "__main__":
    raise SystemExit(main())
