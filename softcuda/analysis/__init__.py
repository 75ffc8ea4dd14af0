"""Reading raw sweeps for people: figures, the crossover report, profile diffs, comparing two
sweeps.  The statistics they rest on are ``softcuda.timings``.

The only part of softcuda that imports matplotlib (lazily, inside the plotting module).
"""
