"""How one point is measured: the sweep's instrument, apart from its schedule.

The runner (``runner.Sweep``) decides what to measure next and keeps what came back; a
``Measurer`` measures what it is handed on this machine, under the spec's repetition policy,
with the inputs drawn once for the whole sweep (``measure.Noise``), and returns the rows
(``measure.time_point``, ``measure.time_bus``) or the figures of a calibration
(``launch.issue_time``, ``switch.hand_off``).  It keeps no state between points but the drawn
inputs.
"""

from __future__ import annotations

from typing import Any

from . import launch, measure, switch
from .machine import Machine
from .measure import Noise, Point
from .spec import Spec


class Measurer:
    def __init__(self, spec: Spec, machine: Machine, noise: Noise) -> None:
        self.spec = spec
        self.machine = machine
        self.noise = noise

    def point(
        self, point: Point, todo: list[str], probing: bool
    ) -> tuple[list[tuple], dict[str, float]]:
        """The rows of the backends ``todo`` at one (op, size), with the host's speed where
        ``probing``, and each backend's median call in its slowest host memory kind."""
        return measure.time_point(point, todo, self.spec, self.machine, self.noise, probing)

    def bus(self, nbytes: int) -> list[tuple]:
        """The bus rows of one transfer size."""
        return measure.time_bus(nbytes, self.spec, self.machine)

    def launch(self) -> dict[str, Any]:
        """The host's time to issue one GPU step of a plan."""
        return launch.issue_time()

    def switch(self) -> dict[str, Any]:
        """What a GPU->CPU hand-off adds to a plan beyond its copy."""
        return switch.hand_off()
