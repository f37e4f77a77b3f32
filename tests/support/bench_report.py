"""The bench's four layouts, in the order it runs them, and its report's table (report.md) read
back into its rows."""

from __future__ import annotations

from tuning.harness.bench import report

LAYOUTS = ["host", "single", "per-rank-isolated", "per-rank-shared"]


def parse_table(md: str) -> dict[str, list[str]]:
    """The table's rows by their first cell (the layout); its header must be report's."""
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == list(report.TABLE_HEADER)
    assert set(lines[1].replace("|", "").split()) == {"---"}
    return {
        cells[0]: cells
        for cells in ([c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:])
    }
