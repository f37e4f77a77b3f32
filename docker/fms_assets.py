"""Bake the demo's tiny model and data into the fms image, with the image's own transformers.

Usage (build stage): PYTHONPATH=<dir holding tuning/container/tiny_model.py,
tuning/container/demo_data.py> python fms_assets.py OUT  ->  OUT/tiny-model/, OUT/demo.jsonl
"""

import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from tuning.container import demo_data, tiny_model  # the harness's generators, not fms's package

out = Path(sys.argv[1])
tokenizer = tiny_model.build_tokenizer(demo_data.corpus())
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(tiny_model.build_config("llama", tokenizer))
model.save_pretrained(out / "tiny-model")
tokenizer.save_pretrained(out / "tiny-model")
demo_data.main(["--out", str(out / "demo.jsonl")])
print(f"fms assets: {out}/tiny-model, {out}/demo.jsonl")
