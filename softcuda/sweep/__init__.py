"""The soft_init experiment: specs, machine detection, measuring, storage, the runner, and the
profile written from it (selection itself is ``softcuda.timings.select``)."""
