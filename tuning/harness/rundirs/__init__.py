"""What a run leaves on disk: run ids and directories, metrics, status rules, checkpoints,
the summary. Host side; not the container side's tuning/sft/records.py (the data records)."""
