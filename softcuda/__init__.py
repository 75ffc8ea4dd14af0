"""softcuda: a lazy tensor library whose backends are chosen once, per (op, size bucket)."""

from __future__ import annotations

__version__ = "0.1.0"
