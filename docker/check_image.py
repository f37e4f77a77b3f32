"""Fails an image build whose packages do not work together (run by the Dockerfile).

transformers silently disables PyTorch when torch is too old for it ("Disabling PyTorch
because PyTorch >= 2.6 is required"), and everything after that fails at the first step of a
run; here it fails the build instead, naming the versions. `--device gpu` also requires a CUDA
build of torch: a GPU image with a CPU wheel would train on the CPU without a word; and
`--device cpu` a CPU build: PyPI's plain torch is the CUDA one, gigabytes the CPU image never
uses (the Dockerfile's TORCH_INDEX gives the CPU wheel).
usage: python check_image.py --device cpu|gpu
"""

import argparse
import importlib
import sys

FIX = "rebuild from the lock (docker/requirements.lock; `make lock` re-makes it)"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=("cpu", "gpu"), required=True)
    device = ap.parse_args().device
    problems = []
    versions = {}
    for name in ("torch", "transformers", "accelerate", "peft", "yaml"):
        try:
            versions[name] = getattr(importlib.import_module(name), "__version__", "?")
        except Exception as exc:  # any import failure is a broken image
            problems.append(f"{name} does not import: {type(exc).__name__}: {exc}")
    if "transformers" in versions and "torch" in versions:
        from transformers.utils import is_torch_available

        if not is_torch_available():
            problems.append(
                f"transformers {versions['transformers']} cannot use torch {versions['torch']}"
                " (it disables PyTorch below the version it needs)"
            )
    cuda = None
    if "torch" in versions:
        import torch

        cuda = getattr(getattr(torch, "version", None), "cuda", None)
        if device == "gpu" and not cuda:
            problems.append(
                f"torch {versions['torch']} is a CPU build; the GPU image needs the CUDA wheel"
                " (docker/requirements-gpu.lock)"
            )
        if device == "cpu" and cuda:
            problems.append(
                f"torch {versions['torch']} is a CUDA {cuda} build; the CPU image needs torch's"
                " CPU wheel (TORCH_INDEX=https://download.pytorch.org/whl/cpu)"
            )
    print("image check:", ", ".join(f"{k} {v}" for k, v in versions.items()), f"CUDA {cuda}")
    for problem in problems:
        print(f"image check: error: {problem}; {FIX}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
