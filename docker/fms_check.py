"""Build-time check of the fms image: fail with the reason, not later inside a rank."""

import contextlib
import io
import sys


def fail(why: str) -> None:
    print(f"fms image check FAILED: {why}", file=sys.stderr)
    sys.exit(1)


captured = io.StringIO()
with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
    try:
        import torch
        import transformers
        from transformers.utils import is_torch_available
    except Exception as e:  # noqa: BLE001 - report whatever broke
        fail(f"torch/transformers do not import: {e!r}")
said = captured.getvalue()
if "Disabling PyTorch because" in said or not is_torch_available():
    fail(f"transformers {transformers.__version__} cannot see torch {torch.__version__}: {said}")
for name in ("accelerate", "peft", "trl", "datasets", "tuning.sft_trainer"):
    try:
        __import__(name)
    except Exception as e:  # noqa: BLE001
        fail(f"{name} does not import: {e!r}")
import tuning  # noqa: E402 - fms's own package, not the harness's

if "site-packages" not in (tuning.__file__ or ""):
    fail(f"`tuning` resolves to {tuning.__file__}, not fms-hf-tuning's installed package")
from importlib.metadata import version  # noqa: E402

print(
    f"fms image check: fms-hf-tuning {version('fms-hf-tuning')}, torch {torch.__version__}, "
    f"transformers {transformers.__version__}, accelerate {version('accelerate')}, "
    f"peft {version('peft')}, trl {version('trl')}"
)
