"""`make up`: train one layout to the end (or, with --dry-run, print what would run)."""

from __future__ import annotations

import argparse
from dataclasses import replace

import yaml

from tuning.harness.checks import preflight, timeouts
from tuning.harness.errors import HarnessError
from tuning.harness.flags import own_trainer, run_flags
from tuning.harness.flags.run_flags import RunFlags
from tuning.harness.layout import options
from tuning.harness.run import lifecycle, render
from tuning.harness.run_files import folders, metric_lines
from tuning.harness.run_files.status import EXIT_CODES, Status
from tuning.harness.stacks import stall
from tuning.harness.verdict import live
from tuning.harness.verdict.record import Verdict


def register(sub) -> None:
    p = sub.add_parser("up", help="train one layout to the end")
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    # STALL: seconds without progress (default: max(60, 10 x the median step time); 0: never)
    after = run_flags.seconds("STALL", a.stall) if a.stall is not None else None
    spec = options.spec_from(RunFlags.of(a))
    if a.dry_run:
        said = spec.layout.topology.gpus_said()
        if said:
            print(f"# {said}")
        if spec.user_config:  # as a real run checks it, with accelerate's own loader
            preflight.check_accelerate_config(spec.accelerate_config, None)
        render.dry_run(spec.layout, spec.accelerate_config)
        # The job every rank reads, as a second YAML document (kube's ConfigMap holds the same)
        print(
            f"---\n# {spec.layout.job_dir}/{spec.layout.trainer.job_file}: {spec.sources_said()}; "
            f"accelerate config {spec.accelerate_config}"
        )
        print(yaml.safe_dump(spec.job, sort_keys=False), end="")
        return 0
    # A stalled run prints where every rank is (stacks/stall.py); one stuck past the job's
    # own collective timeout is ended there (HANG=wait: it goes on, as it would without)
    hang = (a.hang or "end").lower()
    if hang not in ("end", "wait"):
        raise HarnessError(
            f"HANG={a.hang}: end (the default: a hang past its timeout ends) or wait"
        )
    timeout_s, said = job_timeout(spec)
    watch = (
        stall.StallWatch(
            after,
            spec.summary_extra,
            timeout_s=timeout_s,
            timeout_said=said,
            hang=hang,
            backend=spec.layout.topology.backend,
            verdict=live,
        )
        if after != 0
        else None
    )
    limit = after if after is not None else stall.FLOOR_S
    timeouts.say(
        timeouts.check(timeouts.Timeouts.of(spec.job, stall_s=limit or None), None),
        "before the run",
    )
    summary = lifecycle.start(spec, on_tick=watch)
    run_dir = spec.runs_root / spec.layout.run_id
    # a stall's verdict that named nobody (taken while a script with no step lines was still
    # busy, say) gives way to the one its end shows
    watched = summary.get("verdict")  # the stall watch's, as summary.json holds it
    if summary["status"] == Status.FAILED and not (watched and Verdict.from_json(watched).culprits):
        summary = verdict_from_logs(run_dir, summary)
    m = timeouts.measured(run_dir)
    if m is not None:  # the stall time the watch used: set, or the default from this run's steps
        steps = [m.median_step_s] if m.median_step_s else []
        limit = after if after is not None else stall.default_limit(steps)
        found = timeouts.check(timeouts.Timeouts.of(spec.job, stall_s=limit or None), m)
        timeouts.say(found, "what this run measured")
        folders.write_json(run_dir / "summary.json", {**summary, "timeouts": found})
    return EXIT_CODES.get(summary["status"], 1)


def job_timeout(spec) -> tuple[float | None, str]:
    """The job's collective timeout where its files state one: ARGS' --ddp_timeout, the job's
    ddp_timeout (TIMEOUT: ours and fms's); else None (the stall watch reads what the ranks'
    process groups got: a script may set it in its code)."""
    trainer = spec.layout.trainer
    words = trainer.args if trainer.entry else None  # ARGS as words (own_trainer)
    if words is not None:
        raw = own_trainer.value_in(words, "ddp_timeout")
        if raw and raw.replace(".", "", 1).isdigit():
            return float(raw), "ARGS' --ddp_timeout"
        return None, ""
    if spec.job.get("ddp_timeout"):
        return float(spec.job["ddp_timeout"]), "the job's ddp_timeout (TIMEOUT)"
    return None, ""


def verdict_from_logs(run_dir, summary: dict) -> dict:
    """A failed run the stall watch never judged: the verdict from its logs and its containers'
    ends, read as `make repro` reads a cluster's (run_dir/kubectl: what kubectl would give), with
    what the ranks recorded themselves: how each ended, and the flight recorder each failed rank
    wrote (the sizes a gloo size check does not say)."""
    from tuning.harness.clusterlogs import collect, judge
    from tuning.harness.stacks import dumps

    view = collect.kubectl_view(run_dir, run_dir / "kubectl")
    output = run_dir / "output"
    logs, teardown_at = run_dir / "logs", summary.get("teardown_at")
    ranks = live.from_outside(metric_lines.read_metrics(output), logs, teardown_at)
    rec, _, _ = judge.judge(view, dumps.failed(output), ranks)
    v = rec.verdict
    if not v:
        return summary
    from_logs = replace(v, read_from="its logs and its containers' ends")
    summary = {**summary, "verdict": from_logs.to_json()}
    folders.write_json(run_dir / "summary.json", summary)
    print("\n".join(live.said(v)))
    return summary
