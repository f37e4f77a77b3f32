"""Stacks as faulthandler wrote them in real runs, for the readers of stack text."""

from __future__ import annotations

# The main threads of two ranks of the scored pool's run 20 (slow-main on rank 3, single, fms:
# FSDP2 on gloo), as faulthandler wrote them: rank 0 inside the collective, rank 3 in slow-main's
# work, called from FSDP's post-backward hook (torch/distributed/fsdp/), which is no collective.
_FSDP = "/opt/venv/lib/python3.11/site-packages/torch/distributed/fsdp/_fully_shard"
_HOOK = f"""  File "/opt/harness-launch/desync.py", line 175 in wrapper
  File "{_FSDP}/_fsdp_collectives.py", line 461 in foreach_reduce
  File "{_FSDP}/_fsdp_param_group.py", line 457 in post_backward
  File "/opt/venv/lib/python3.11/site-packages/tuning/sft_trainer.py", line 620 in train
"""
WAITING = f"""Current thread 0x00007f04395eb040 (most recent call first):
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4457 in reduce_scatter_tensor
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81 in wrapper
  File "/opt/harness-launch/desync.py", line 100 in call
{_HOOK}"""  # noqa: E501
BUSY = f"""Current thread 0x00007f04a4d5d040 (most recent call first):
  File "/opt/harness-launch/desync.py", line 152 in main_process_work
  File "/opt/harness-launch/desync.py", line 122 in slow_main
  File "/opt/harness-launch/desync.py", line 106 in call
{_HOOK}"""
