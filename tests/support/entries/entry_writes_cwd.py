"""A foreign trainer (ENTRY) that writes its results to its working directory, as many scripts
do: on the harness's read-only root (as in a PyTorchJob pod) that write fails with EROFS.
tests/engine/faults/test_fault_kinds_docker.py puts it into an image FROM the harness's own and
runs it."""

from pathlib import Path

Path("results.txt").write_text("trained\n")
