"""Dense bf16 peak TFLOP/s of common NVIDIA parts, matched on the name torch
(``torch.cuda.get_device_name()``) or ``nvidia-smi --query-gpu=name`` gives.

The figures are NVIDIA's datasheet "BF16 Tensor Core" numbers WITHOUT sparsity (the datasheets
print the 2:4 sparse figure, twice these, with an asterisk); for the Ada and Ampere workstation
cards, the architecture whitepapers' "BF16 Tensor TFLOPS with FP32 accumulate", dense. Parts
whose figure we could not pin down (A10G, H800 PCIe, H200 NVL...) are left out on purpose: MFU
then needs ``--peak-tflops``, rather than a guess.

    python benchmarks/gpu_peaks.py "NVIDIA H100 80GB HBM3"    # prints 989 and the part
"""

from __future__ import annotations

import re
import sys

# (pattern on the device name, dense bf16 TFLOP/s, the part). First match wins, so the
# specific variants (NVL, PCIe) come before their family; \b keeps A10 off A100 and A10G,
# and B200 off GB200.
PEAKS: tuple[tuple[str, float, str], ...] = (
    (r"\bGB200\b", 2500, "GB200 (per GPU)"),
    (r"\bB200\b", 2250, "B200"),
    (r"\bB100\b", 1750, "B100"),
    (r"\bGH200\b", 989, "GH200"),
    (r"\bH200\b(?!.*\bNVL\b)", 989, "H200 SXM"),
    (r"\bH100\b.*\bNVL\b", 835, "H100 NVL"),
    (r"\bH100\b.*\bPCIe\b", 756, "H100 PCIe"),
    (r"\bH100\b", 989, "H100 SXM (HBM3)"),
    (r"\bH800\b(?!.*\bPCIe\b)", 989, "H800 SXM"),
    (r"\bA100\b", 312, "A100"),
    (r"\bA800\b", 312, "A800"),
    (r"\bA10\b", 125, "A10"),
    (r"\bL40S\b", 362, "L40S"),
    (r"\bL40\b", 181, "L40"),
    (r"\bL4\b", 121, "L4"),
    (r"\bRTX 6000 Ada\b", 364, "RTX 6000 Ada"),
    (r"\bRTX 4090\b", 165, "GeForce RTX 4090"),
    (r"\bRTX A6000\b", 155, "RTX A6000"),
)


def peak_for(name: str) -> tuple[float, str] | None:
    """(dense bf16 TFLOP/s, the part) for a GPU's name; None for a part not in the table."""
    for pattern, tflops, part in PEAKS:
        if re.search(pattern, name, re.IGNORECASE):
            return float(tflops), part
    return None


def unknown(name: str) -> str:
    return (
        f"no dense bf16 peak known for the GPU {name!r} (benchmarks/gpu_peaks.py lists the "
        "common parts): pass --peak-tflops N, its dense (no sparsity) bf16 TFLOP/s from "
        "the vendor's datasheet"
    )


def resolve_peak(given: float | None, gpu: str | None) -> tuple[float, str]:
    """(peak TFLOP/s per device, where it came from): --peak-tflops always wins; else the
    table's dense bf16 figure for the GPU's name. ValueError names what is missing."""
    if given is not None:
        if given <= 0:
            raise ValueError(f"--peak-tflops {given:g} must be positive")
        return given, "given (--peak-tflops)"
    name = gpu or _device_name()
    if not name:
        raise ValueError(
            "no GPU to take the peak from (no --gpu, and torch sees no GPU): pass "
            "--gpu NAME or --peak-tflops N"
        )
    found = peak_for(name)
    if found is None:
        raise ValueError(unknown(name))
    return found[0], f"{found[1]}, dense bf16 (benchmarks/gpu_peaks.py, from {name!r})"


def _device_name() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 (no torch, no driver: no name)
        return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python benchmarks/gpu_peaks.py GPU_NAME", file=sys.stderr)
        return 2
    found = peak_for(argv[0])
    if found is None:
        print(f"gpu_peaks: {unknown(argv[0])}", file=sys.stderr)
        return 2
    print(f"{found[0]:g} {found[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
