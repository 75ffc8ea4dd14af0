"""The soft_init experiment: sweep specs, timers, the runner, and backend selection."""
