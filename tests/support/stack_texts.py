"""Stacks as faulthandler wrote them in real runs, for the readers of stack text."""

from __future__ import annotations

# The main threads of two ranks of the scored pool's run 20 (slow-main on rank 3, single, fms:
# FSDP2 on gloo), as faulthandler wrote them: rank 0 inside the collective, rank 3 in slow-main's
# work, called from FSDP's post-backward hook (torch/distributed/fsdp/), which is no collective.
_FSDP = "/opt/venv/lib/python3.11/site-packages/torch/distributed/fsdp/_fully_shard"
_HOOK = f"""  File "/opt/harness-launch/desync.py", line 175 in wrapper
  File "{_FSDP}/_fsdp_collectives.py", line 461 in foreach_reduce
  File "{_FSDP}/_fsdp_param_group.py", line 457 in post_backward
  File "/opt/venv/lib/python3.11/site-packages/tuning/container/sft_trainer.py", line 620 in train
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

# Seed 2's fresh draw, run 24 (slow rank 1 of 2, per-rank, a user's script): the throttled rank 1,
# dumped while the group still stepped, inside FSDP2's post_backward (its own Python, between
# collectives), its flight recorder with nothing pending; it was read as calling a collective
# there, against rank 0's all_gather #358.
_TRAINER = "/opt/venv/lib/python3.11/site-packages/transformers/trainer.py"
IN_FSDP_POST_BACKWARD = f"""Current thread 0x00007fdea1f382c0 (most recent call first):
  File "/opt/venv/lib/python3.11/site-packages/torch/utils/_contextlib.py", line 124 in decorate_context
  File "{_FSDP}/_fsdp_param_group.py", line 688 in post_backward
  File "/opt/venv/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py", line 1446 in _fn
  File "{_FSDP}/_fsdp_common.py", line 30 in wrapper
  File "{_FSDP}/_fsdp_state.py", line 415 in _root_post_backward_final_callback
  File "/opt/venv/lib/python3.11/site-packages/torch/autograd/graph.py", line 979 in _engine_run_backward
  File "/opt/venv/lib/python3.11/site-packages/accelerate/accelerator.py", line 2767 in backward
  File "{_TRAINER}", line 2126 in training_step
  File "/src/train_sft.py", line 69 in main
"""  # noqa: E501
IN_ALL_GATHER = """Current thread 0x00007fd21c8fa2c0 (most recent call first):
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/_functional_collectives.py", line 142 in wait_tensor
  File "/opt/venv/lib/python3.11/site-packages/accelerate/accelerator.py", line 2880 in <listcomp>
  File "/src/train_sft.py", line 69 in main
"""  # noqa: E501
