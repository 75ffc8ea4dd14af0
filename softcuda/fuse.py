"""Fusion, compile's second stage, between placement and lowering: empty for now.

Its place in the pipeline is fixed here so that fusion lands as a stage, not as special cases
in lowering: it will take the placed graph and group elementwise ops (with at most one
reduction at the end, and row-wise composites) that share a device into one generated kernel
per group, priced by the cost model.  Today every node is its own group, and the placed graph
goes on to lowering as it came.
"""

from __future__ import annotations

from .planner import Placed


def fuse(placed: Placed) -> Placed:
    """The placed graph with its fused groups: as it came, until fusion lands."""
    return placed
