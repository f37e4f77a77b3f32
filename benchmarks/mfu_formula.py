"""benchmarks/mfu.py's formula, pure: torchtitan's training FLOPs per token, MFU, a config's
attention dims, and the parameter count (built on the meta device, no weights, no GPU)."""

from __future__ import annotations

from pathlib import Path


def flops_per_token(n_nonembedding: int, layers: int, heads: int, head_dim: int, seq_len: int):
    """torchtitan's training FLOPs per token: (6N, attention, their sum)."""
    dense = 6 * n_nonembedding
    attention = 12 * layers * heads * head_dim * seq_len
    return dense, attention, dense + attention


def mfu(flops_per_tok: float, tokens_per_s_per_device: float, peak_flops: float) -> float:
    """Model FLOPs utilisation, a fraction of the peak."""
    if peak_flops <= 0:
        raise ValueError("peak FLOP/s must be positive")
    return flops_per_tok * tokens_per_s_per_device / peak_flops


def attention_dims(config: dict) -> tuple[int, int, int]:
    """(layers, heads, head_dim) from a Hugging Face config.json (llama-like or gpt2)."""
    layers = config.get("num_hidden_layers", config.get("n_layer"))
    heads = config.get("num_attention_heads", config.get("n_head"))
    hidden = config.get("hidden_size", config.get("n_embd"))
    if not (layers and heads and hidden):
        raise ValueError("config.json names no layers / heads / hidden size")
    head_dim = config.get("head_dim") or hidden // heads
    return int(layers), int(heads), int(head_dim)


def count_params(model_dir: str | Path) -> dict:
    """Parameters of the model in model_dir, built on the meta device from its config."""
    import torch
    from torch import nn
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())  # a tied weight counts once
    embedding = sum(
        p.numel()
        for m in model.modules()
        if isinstance(m, nn.Embedding)
        for p in m.parameters(recurse=False)
    )
    return {"params": total, "embedding": embedding, "non_embedding": total - embedding}
