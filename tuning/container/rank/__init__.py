"""The rank side that runs under any trainer: the rank recorder (rank_record.py) and the
modules mounted beside it in a foreign image (layout/layout.py BESIDE_RECORDER is this folder).
Standard library only at import: each loads torch only inside functions, where it exists."""
