"""What a run leaves in its folder, written and read back: folders.py (the folder, its id, its
JSON files), metric_lines.py (the ranks' metric lines and figures), status.py (how it ended).
Host side; not the container side's tuning/container/sft/records.py (the data records)."""
