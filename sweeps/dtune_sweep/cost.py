"""What a run costs under a time budget, per candidate, learnt from the runs a tune makes.

A run of candidate c for s measured steps takes a + b_c s seconds:
- a, the fixed start-up (mpirun, the model's build, the warm-up steps), shared by a sweep's
  candidates (one binary, one launch): the median over every run made of its time less its measured
  steps' time;
- b_c, the candidate's own time per step: the median of its runs' recorded step times. Candidates
  differ by far more than noise (on a CPU without bf16 units a bf16 step takes 12-19 times an fp32
  one; a batch twice as large takes about twice as long), so one probe run priced every candidate
  wrongly: a bf16 probe sized the schedule for bf16 runs and drew half of an fp32 sweep.
- A candidate not run yet is priced at the median of the step times of those run (the probe's
  alone at first), and repriced as soon as it has run once.

Runs that did not measure (failed, out of memory) teach nothing about steps; their time prices
a run, as all start-up, only while no run has measured.
"""

from __future__ import annotations

import numpy as np


class CostModel:
    def __init__(self):
        self.runs: dict = {}  # point id -> (key, seconds, measured steps, seconds per step)
        self.bare: dict = {}  # point id -> seconds of a run that did not measure
        # A tune prices thousands of runs between two observations: what they read is kept until
        # the next one (each candidate's own step until a run of it is observed).
        self._own: dict = {}  # key -> its median step
        self._memo: dict = {}  # the start-up, the median candidate's step, the keys measured

    def observe(self, pid: str, key: int, seconds: float, steps: int, step_s: float | None) -> None:
        """A finished run: its time, its measured steps and their median time (None: it did not
        measure)."""
        self._memo.clear()
        if step_s is not None and seconds > 0 and step_s > 0 and steps > 0:
            self.runs[pid] = (key, float(seconds), int(steps), float(step_s))
            self._own.pop(key, None)
        elif seconds > 0:
            self.bare[pid] = float(seconds)

    def seen(self) -> set:
        return set(self.runs) | set(self.bare)

    def known(self) -> bool:
        return bool(self.runs or self.bare)

    def startup(self) -> float:
        if "startup" not in self._memo:
            if not self.runs:
                a = float(np.median(list(self.bare.values()))) if self.bare else 0.0
            else:
                a = float(np.median([max(t - b * s, 0.0) for _, t, s, b in self.runs.values()]))
            self._memo["startup"] = a
        return self._memo["startup"]

    def step_s(self, key: int | None = None) -> float:
        """Seconds per step of candidate `key`; the median candidate's for one not run (or None)."""
        keys = self.measured_keys()
        if key is not None and key in keys:
            return self._own_step(key)
        if "median" not in self._memo:
            self._memo["median"] = float(np.median([self._own_step(k) for k in keys])) if keys else 0.0
        return self._memo["median"]

    def _own_step(self, key: int) -> float:
        if key not in self._own:
            self._own[key] = float(np.median([b for k, _, _, b in self.runs.values() if k == key]))
        return self._own[key]

    def run_s(self, key: int | None, steps: int) -> float:
        return self.startup() + self.step_s(key) * steps

    def measured_keys(self) -> set:
        if "keys" not in self._memo:
            self._memo["keys"] = {k for k, _, _, _ in self.runs.values()}
        return self._memo["keys"]

    def summary(self, name=str) -> dict:
        """What tune.json records: the start-up, the median candidate's step, and each run
        candidate's own step, by name(key)."""
        return {
            "startup_s": self.startup(),
            "step_s": self.step_s(None),
            "step_s_by_candidate": {name(k): self.step_s(k) for k in sorted(self.measured_keys())},
            "runs": len(self.runs),
        }
