"""How often to checkpoint on a cluster that fails as a matter of course: Young and Daly's
first-order model, fed with what a run of the job measured here.

With M the time between failures of the whole job, C the cost of one save and R the cost of a
restart (detect, tear down, restart, rendezvous, load the checkpoint), the interval that loses
least is tau = sqrt(2 C M) (Young 1974; Daly 2006, to first order), and the share of wall time
that ends up in the final model, the effective training time (Meta's RSC study), is about
    ETT(tau) = 1 - C / tau - (tau / 2 + R) / M
(each interval pays one save; each failure pays the restart and, on average, half an interval
of work lost). The job's M is the per-GPU rate over its GPUs: by default Llama 3's, 419
unexpected interruptions in 54 days on 16,384 H100s, about one per 50,000 GPU-hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LLAMA3_GPU_HOURS = 16_384 * 54 * 24 / 419  # GPU-hours per failure: ~50,677 (Llama 3 paper)
RESTART_S = 180.0  # a pod's restart on a cluster when none was measured: schedule, pull, load


def interval_s(save_s: float, mtbf_s: float) -> float:
    """Young/Daly's interval between saves."""
    return math.sqrt(2 * save_s * mtbf_s)


def ett(tau_s: float, save_s: float, restart_s: float, mtbf_s: float) -> float:
    """The expected effective training time at a save every `tau_s` (first order)."""
    return 1 - save_s / tau_s - (tau_s / 2 + restart_s) / mtbf_s


@dataclass(frozen=True)
class Advice:
    gpus: int
    gpu_hours_per_failure: float
    save_s: float
    restart_s: float
    step_s: float

    @property
    def mtbf_s(self) -> float:
        return self.gpu_hours_per_failure * 3600 / self.gpus

    @property
    def tau_s(self) -> float:
        return interval_s(self.save_s, self.mtbf_s)

    @property
    def save_steps(self) -> int:
        return max(1, round(self.tau_s / self.step_s))

    @property
    def ett(self) -> float:
        return ett(self.tau_s, self.save_s, self.restart_s, self.mtbf_s)

    def sentence(self, restart_said: str = "") -> str:
        rate = f"{self.gpu_hours_per_failure:,.0f}"
        return (
            f"{self.gpus} GPUs at one failure per {rate} GPU-hours: a failure every "
            f"{duration(self.mtbf_s)}; your save takes {seconds(self.save_s)} and a restart "
            f"{duration(self.restart_s)}{restart_said}: save every {duration(self.tau_s)} "
            f"({self.save_steps:,} steps at your {self.step_s:.3g} s step); ETT "
            f"{100 * self.ett:.1f} %"
        )


def seconds(s: float) -> str:
    """40 s, 2.5 s, 0.14 s: a sub-second save is not "0 s" (the demo's takes 0.14 s)."""
    return f"{s:.0f} s" if s >= 10 else f"{s:.2g} s"


def duration(seconds: float) -> str:
    """98 h, 1 h 28 min, 3 min, 42 s."""
    if seconds >= 20 * 3600:
        return f"{seconds / 3600:.0f} h"
    h, m = divmod(round(seconds / 60), 60)
    if h:
        return f"{h} h {m} min" if m else f"{h} h"
    return f"{m} min" if m else f"{seconds:.0f} s"


def rate_arg(raw: str | float | None) -> float:
    """GPU_HOURS_PER_FAILURE: a positive number of GPU-hours (default Llama 3's)."""
    from tuning.harness.errors import HarnessError

    if raw is None or raw == "":
        return LLAMA3_GPU_HOURS
    try:
        value = float(str(raw).replace(",", "").replace("_", ""))
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value <= 0:
        raise HarnessError(
            f"GPU_HOURS_PER_FAILURE={raw!r}: a positive number of GPU-hours per failure, e.g. "
            "GPU_HOURS_PER_FAILURE=50000 (Llama 3's: 50,700)"
        )
    return value


def from_run(run_dir, gpus: int, gpu_hours_per_failure: float) -> Advice | None:
    """The advice for `gpus` from what a run of the job measured here (its slowest save, its
    median step); None when it logged no save or no step."""
    from tuning.harness.checks import timeouts

    m = timeouts.measured(run_dir)
    if m is None or not m.save_s or not m.median_step_s:
        return None
    return Advice(gpus, gpu_hours_per_failure, m.save_s, RESTART_S, m.median_step_s)


def advise(job: dict, devices: int, measured_in, rate: float, take: bool) -> dict:
    """`make kube`: the advice for the job's devices (GPUs; CPU ranks stand in for them) from
    what its newest run here measured, said; with `take` (SAVE_ADVISED=1) the job saves at
    that interval, else it stays as it is."""
    from tuning.harness.errors import HarnessError

    advice = measured_in and from_run(measured_in, devices, rate)
    if not advice:
        print(
            "harness: save interval: no run of this job with a save measured here; run it "
            "(make up JOB=...) for the advice"
        )
        if take:
            raise HarnessError("SAVE_ADVISED=1 needs a run of this job here that saved")
        return job
    said = f" (assumed; run {measured_in.name} measured the save and the step)"
    print(f"harness: save interval: {advice.sentence(said)}")
    if not take:
        return job
    print(f"harness: SAVE_ADVISED: save_steps {job.get('save_steps')} -> {advice.save_steps}")
    return {**job, "save_strategy": "steps", "save_steps": advice.save_steps}
