"""The follow's incremental metrics reader (run_files/metric_lines.py MetricsReader): each call
returns what a whole read returns now, while the ranks append, a line is half written, or a
file is rewritten shorter."""

import json

from tuning.harness.run_files.metric_lines import MetricsReader, read_metrics


def line(**x) -> str:
    return json.dumps(x) + "\n"


def test_reader_matches_a_whole_read_as_ranks_append(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    r0, r1 = metrics / "rank0.jsonl", metrics / "rank1.jsonl"
    r0.write_text(line(event="phase", name="training", step=0, time=1.0))
    reader = MetricsReader(tmp_path)
    assert reader() == read_metrics(tmp_path) == {0: [read_metrics(tmp_path)[0][0]]}

    # a line half written (no newline yet) is left for the next call, then read whole
    half = line(event="step", step=1, time=2.0, step_s=0.5)
    with open(r0, "a") as f:
        f.write(half[:10])
    r1.write_text(line(event="step", step=1, time=2.0, step_s=0.5))
    got = reader()
    assert got == read_metrics(tmp_path)
    assert len(got[0]) == 1 and len(got[1]) == 1
    with open(r0, "a") as f:
        f.write(half[10:] + "not json\n" + line(event="step", step=2, time=2.5, step_s=0.5))
    got = reader()
    assert got == read_metrics(tmp_path)
    assert [x.get("step") for x in got[0]] == [0, 1, 2]


def test_reader_hands_out_lists_of_its_own(tmp_path):
    (tmp_path / "metrics").mkdir()
    path = tmp_path / "metrics" / "rank0.jsonl"
    path.write_text(line(step=1))
    reader = MetricsReader(tmp_path)
    first = reader()
    first[0].append({"step": 99})  # a caller's change stays the caller's
    with open(path, "a") as f:
        f.write(line(step=2))
    assert reader()[0] == [{"step": 1}, {"step": 2}]
    assert first[0] == [{"step": 1}, {"step": 99}]  # and the next call leaves it as it was


def test_reader_starts_over_on_a_file_rewritten_shorter(tmp_path):
    (tmp_path / "metrics").mkdir()
    path = tmp_path / "metrics" / "rank0.jsonl"
    path.write_text(line(step=1, note="a long line that the rewrite will not have") * 3)
    reader = MetricsReader(tmp_path)
    assert len(reader()[0]) == 3
    path.write_text(line(step=7))
    assert reader() == read_metrics(tmp_path) == {0: [{"step": 7}]}
