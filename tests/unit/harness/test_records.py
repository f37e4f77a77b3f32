"""Every measured table that benchmarks/tables.py makes is its records (docs/records/): a page
whose table differs from what its records give fails here, and each record names its code and
the command that made it."""

from __future__ import annotations

import json
import sys

import pytest

from support.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import tables  # noqa: E402

BLOCKS = {
    name: page
    for page, text in tables.pages().items()
    for name in tables.TABLES
    if f"<!-- table: {name} -->" in text
}


def test_every_table_has_its_place_in_its_page():
    assert set(BLOCKS) == set(tables.TABLES), set(tables.TABLES) - set(BLOCKS)


@pytest.mark.parametrize("name", sorted(tables.TABLES))
def test_a_table_is_what_its_records_give(name):
    page = ROOT / tables.TABLES[name][0]
    text = page.read_text()
    assert tables.remade(text) == text, (
        f"{page.relative_to(ROOT)}: the {name} table is not its records "
        "(.venv/bin/python benchmarks/tables.py --docs)"
    )


def test_each_record_says_its_command_and_the_tables_records_their_code():
    for path in sorted(tables.RECORDS.glob("*.json")):
        rec = json.loads(path.read_text())
        if path.name == "pool_seen.json" or path.name.startswith("repro_"):
            continue  # the ledger; repro's records (benchmarks/repro_corpus.py makes them)
        for entry in rec if isinstance(rec, list) else [rec]:
            assert entry.get("command"), path.name
    for pattern in ("pool_s[0-9]*.json", "bench_*.json", "trainer_overhead.json"):
        for path in tables.RECORDS.glob(pattern):
            assert json.loads(path.read_text()).get("code"), path.name


def test_a_record_changed_is_a_table_changed(tmp_path, monkeypatch):
    """The check can fail: a figure changed in a record changes the page's table."""
    name = next(n for n in sorted(tables.TABLES) if n in BLOCKS)
    page = ROOT / tables.TABLES[name][0]
    before = tables.remade(page.read_text())
    records = tmp_path / "records"
    records.mkdir()
    for p in tables.RECORDS.glob("*.json"):
        (records / p.name).write_text(json.dumps(_bumped(json.loads(p.read_text()))))
    monkeypatch.setattr(tables, "RECORDS", records)
    assert tables.remade(page.read_text()) != before


def _bumped(rec):
    """Every number in a record, plus one."""
    if isinstance(rec, dict):
        return {k: _bumped(v) for k, v in rec.items()}
    if isinstance(rec, list):
        return [_bumped(v) for v in rec]
    if isinstance(rec, bool) or not isinstance(rec, int | float):
        return rec
    return rec + 1
