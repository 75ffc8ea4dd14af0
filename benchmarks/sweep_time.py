"""Where does a sweep's wall time go?

Runs ``softcuda init`` in this process with a sampler thread that reads the main thread's
stack every ``--every`` seconds (``sys._current_frames``), then prints, per function, the
seconds during which it was on the stack (inclusive) and on top of it (self).  Unlike a
tracing profiler it does not slow every Python call, and it counts time spent in C (CUDA
synchronisation, allocation, numpy) against the Python function that called it.  It does take
the GIL at each sample, which can delay a timed call: a sweep run this way shows where the time
goes; its timings are not a measurement to keep.  Its output on the H200 is archived
(``sweep-time-*.txt``, see ``results/nvidia-h200/ARCHIVE.md``); docs/findings.md, "Where the
sweep's time goes", says what it found.

    python benchmarks/sweep_time.py [--every 0.01] [--top 40] -- init --spec sweeps/default.yaml ...
    python benchmarks/sweep_time.py --top 10 -- init --spec sweeps/smoke.yaml --out /tmp/C.soft
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time

import click


def sample(thread_id: int, every: float, stop: threading.Event, stacks: list) -> None:
    while not stop.wait(every):
        frame = sys._current_frames().get(thread_id)
        names = []
        while frame is not None:
            code = frame.f_code
            names.append(f"{code.co_filename.rsplit('/', 2)[-1]}:{code.co_name}")
            frame = frame.f_back
        stacks.append(names)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=float, default=0.01, help="seconds between samples")
    parser.add_argument("--top", type=int, default=40, help="functions listed")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="softcuda's arguments, after --")
    args = parser.parse_args()
    argv = args.args[1:] if args.args[:1] == ["--"] else args.args
    import softcuda_cli

    stacks: list[list[str]] = []
    stop = threading.Event()
    sampler = threading.Thread(
        target=sample, args=(threading.get_ident(), args.every, stop, stacks), daemon=True
    )
    started = time.perf_counter()
    sampler.start()
    code = 0
    try:
        softcuda_cli.main(argv, standalone_mode=False)
    except SystemExit as exc:
        code = int(exc.code or 0)
    except click.ClickException as exc:  # what the command line says in one line, said so here
        exc.show()
        code = exc.exit_code
    finally:
        stop.set()
        sampler.join()
    wall = time.perf_counter() - started
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    for names in stacks:
        inclusive.update(set(names))
        if names:
            own[names[0]] += 1
    per = wall / max(len(stacks), 1)
    print(f"\n{len(stacks)} samples over {wall:.1f} s ({per * 1e3:.1f} ms each)")
    print(f"{'inclusive s':>12} {'self s':>8}  function")
    for name, n in inclusive.most_common(args.top):
        print(f"{n * per:12.1f} {own[name] * per:8.1f}  {name}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
