"""The package's version, in a module of its own: modules below the package face (device.py
records it in a profile) read it from here, not from the package while it is initialising."""

from __future__ import annotations

__version__ = "0.1.0"
