"""Stability of the sweep: run one spec twice back to back on this machine and compare.

The comparison is ``softcuda.analysis.compare`` (``softcuda compare-sweeps A B`` makes it for
two CSVs measured before): per op, the bucket assignments of both runs and how far each
boundary moved, how many medians agree within 10% (each counted once), and the host's speed
while each point was measured.  This script adds what only running the sweeps can: fixed
workloads timed before, between and after the runs (those a sweep times while it settles,
``softcuda.sweep.settle``), which show whether the machine itself moved.
The report ends with two verdicts: the share of medians within 10% (the older bar), and the
restated criterion the reference is held to (``compare.Restated``: identical assignments,
boundaries within their own 95% interval or 15%, every kernel-only median within 5%, end-to-end
medians reported beside the host's spread).  Exit status 0 when the restated criterion holds, 1
when not (its line ends in NOT STABLE (restated)); on a machine without a GPU (CI's smoke
sweep) there are no kernel-only medians, the restated verdict is "not applicable", and the first
verdict sets the status instead (0 on STABLE, 1 on NOT STABLE).  2 when the spec cannot be used
here (refused, its time budget spent) or the results folder is another sweep's; errors are one
line.  The sweeps hold the results folder's lock, as `softcuda init` does, so that neither times
another sweep's work.

    python benchmarks/stability.py sweeps/stability.yaml [--results /tmp/stability]
    python benchmarks/stability.py sweeps/smoke.yaml     # seconds, no GPU needed (CI)
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from softcuda.analysis.compare import compare_sweeps, format_comparison
from softcuda.errors import SoftcudaError
from softcuda.sweep import folders
from softcuda.sweep.machine import Machine, detect
from softcuda.sweep.runner import Sweep, device_folder
from softcuda.sweep.settle import canary
from softcuda.sweep.spec import Spec, load_spec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("--results", default=None, help="folder for the two raw CSVs")
    args = parser.parse_args()
    results = args.results or tempfile.mkdtemp(prefix="softcuda-stability-")
    try:
        spec = load_spec(args.spec)
        machine = detect()
        folder = device_folder(results, machine)
        folders.make_folder(folder)
        with folders.hold(folder / folders.LOCK_NAME, str(folder)):
            return compare_two_runs(spec, args.spec, results, machine)
    except SoftcudaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def compare_two_runs(spec: Spec, spec_path: str, results: str, machine: Machine) -> int:
    """Run ``spec`` twice, print the comparison, and return the exit status."""
    print(f"machine: {machine.label}; spec {spec_path}; raw CSVs under {results}")
    cuda = machine.device_type == "cuda"
    canaries = [canary(cuda)]
    frames = []
    for run in (1, 2):
        sweep = Sweep(spec, spec_path, results, machine=machine)
        frames.append(sweep.run())  # each sweep settles first, as `softcuda init` does
        print(
            f"run {run}: settling: {sweep.settle().summary()}; measured in {sweep.elapsed_s} s, "
            f"{sweep.waited_s:.1f} s of it waiting for the host before re-measuring"
        )
        canaries.append(canary(cuda))
    comparison = compare_sweeps(frames, spec.metric)
    print(format_comparison(comparison, canaries), end="")
    restated = comparison.restated
    stable = restated.stable if restated.applicable else comparison.stable
    return 0 if stable else 1


if __name__ == "__main__":
    raise SystemExit(main())
