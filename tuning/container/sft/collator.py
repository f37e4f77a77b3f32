"""The trainer's batches: a batch of tokenized examples padded as fms's collators pad it."""

from __future__ import annotations

from tuning.container.sft.chat import IGNORE_INDEX


class Collator:
    """Pads a batch on the tokenizer's padding side (as the collators fms uses pad it, through
    the tokenizer): padding gets attention 0 and label -100; `index` -> `sample_index`."""

    def __init__(self, pad_token_id: int, padding_side: str = "right"):
        self.pad_token_id, self.left = pad_token_id, padding_side == "left"

    def __call__(self, features: list[dict]) -> dict:
        import torch

        width = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(features), width), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(features), width), dtype=torch.long)
        for row, f in enumerate(features):
            n = len(f["input_ids"])
            cols = slice(width - n, width) if self.left else slice(0, n)
            ids[row, cols] = torch.tensor(f["input_ids"], dtype=torch.long)
            labels[row, cols] = torch.tensor(f["labels"], dtype=torch.long)
            mask[row, cols] = 1
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        if "index" in features[0]:
            batch["sample_index"] = torch.tensor([f["index"] for f in features], dtype=torch.long)
        return batch
