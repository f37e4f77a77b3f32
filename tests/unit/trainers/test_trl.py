"""The figures a trainer's log carries are text until parsed: transformers 5 prints the
Trainer's floats as text ('256') (TRL's own SFT script in containers:
engine/trainers/test_trl_docker.py)."""

from __future__ import annotations

from tuning.harness.run import foreign

# --- what a trainer's log says, read as it is written ------------------------------------------


def test_the_trainers_logged_figures_are_parsed_from_text(tmp_path):
    """transformers 5's ProgressCallback.on_log writes str() of the logs with each float as
    f"{v:.4g}" (a string); older ones write the numbers. Both give the same tokens."""
    steps = [{"step": i, "time": 100.0 + i} for i in (1, 2, 3)]
    printed = {
        1: "{'loss': '3.1', 'num_tokens': '256', 'epoch': '0.1'}",
        2: "{'loss': '2.9', 'num_tokens': '512', 'epoch': '0.2'}",
        3: "{'loss': 2.7, 'num_tokens': 768.0, 'epoch': 0.3}",
    }
    log = tmp_path / "trainer.log"
    log.write_text("".join(f"{printed[i]}\n" for i in (1, 2, 3)))
    pairs, source = foreign.trl_tokens(log, steps)
    assert [n for _, n in pairs] == [256.0, 512.0, 768.0], source
    log.write_text(log.read_text().replace("'512'", "'[String too long to display]'"))
    pairs, source = foreign.trl_tokens(log, steps)
    assert pairs is None and "'[String too long to display]' is not a number" in source
    # the rank recorder's step lines carry it as a number, and come first
    recorded = [{**s, "num_tokens": 100 * s["step"]} for s in steps]
    pairs, source = foreign.trl_tokens(log, recorded)
    assert [n for _, n in pairs] == [100.0, 200.0, 300.0] and "step lines" in source
    end = "{'train_runtime': '5.021', 'train_samples_per_second': '19.12', 'epoch': '1'}"
    assert foreign.hf_train_metrics(end) == {
        "train_runtime": 5.021,
        "train_samples_per_second": 19.12,
        "epoch": 1.0,
    }
