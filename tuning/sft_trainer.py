"""`python -m tuning.sft_trainer`: fms's entry name, which fms's jobs (HARNESS_ENTRY,
`accelerate launch -m`) and this image call. The module is tuning/container/sft_trainer.py;
importing this name gives that module itself, so the two can never differ.
"""

import runpy
import sys

if __name__ == "__main__":
    runpy.run_module("tuning.container.sft_trainer", run_name="__main__", alter_sys=True)
else:
    from tuning.container import sft_trainer

    sys.modules[__name__] = sft_trainer
