"""The soft_init experiment: sweep specs, timers, the runner, and the profile written from its
rows (selection itself is ``softcuda.timings.select``)."""
