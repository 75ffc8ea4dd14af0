"""The tuning cache: which placement a graph measured fastest under a profile, kept on disk.

``compile(..., tune=True)`` (softcuda.graph) times the model's plan and its rivals and keeps the
fastest; this module says what such a choice is keyed by and stores it, so that the next process
compiling the same graph under the same profile reuses the choice without measuring.

The key is the graph's signature (every node's op, shape, dtype, strides and attributes, which
nodes it reads; the outputs and the updates), the host memory, whether the plan is fused, and
the placements tried; the entry also holds the profile's hash (its text as written) and the
softcuda version.  A file for another version or profile, or one that does not parse, is
ignored with one warning and measured again.  The folder is the native kernels' cache folder
(``$SOFTCUDA_CACHE``, else ``$XDG_CACHE_HOME/softcuda``, else ``~/.cache/softcuda``), under
``tune/``; a file is written whole (a temporary file renamed) or not at all.  Where the folder
cannot be written (a read-only home), a choice is kept in memory for the process, said once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from .backends.native import cache_dir
from .config import Config, format_config
from .version import __version__

Node = Any  # a softcuda.tensor.Tensor


def signature(
    order: list[Node], roots: list[Node], updates: list[tuple[Node, Node]], *extra: Any
) -> str:
    """A short hash of what a plan's timing depends on: the graph's structure, shapes, dtypes,
    layouts and attributes (a constant's value aside), and ``extra`` (host memory, fusion, the
    placements tried)."""
    index = {id(n): i for i, n in enumerate(order)}
    parts = []
    for node in order:
        attrs = sorted((k, repr(v)) for k, v in node.attrs.items() if k != "value")
        reads = [index.get(id(t), -1) for t in node.inputs]
        parts.append((node.op, node.dims, node.dtype.str, node.stride, attrs, reads))
    ends = [index[id(r)] for r in roots]
    writes = [(index.get(id(leaf), -1), index[id(v)]) for leaf, v in updates]
    text = repr((parts, ends, writes, extra))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def profile_hash(config: Config) -> str:
    """The profile as written, hashed: another profile (or the same file measured again) is
    another key's world."""
    return hashlib.sha256(format_config(config).encode()).hexdigest()[:24]


_in_memory: dict[str, dict] = {}
"""Entries this process measured but could not write: reused from here for its lifetime."""
_said: set[str] = set()
"""The folders already said to be unwritable (once each per process)."""


def path(key: str) -> Path:
    return cache_dir() / "tune" / f"{key}.json"


def source(key: str) -> str:
    """Where a cached choice for ``key`` comes from, as explain() names it."""
    if key in _in_memory:
        return "in memory (its folder cannot be written)"
    return str(path(key))


def load(key: str, config: Config) -> dict | None:
    """The cached choice for ``key`` under ``config``, or None (absent, or ignored with one
    warning: another version, another profile, or a file that does not parse).  A choice
    kept in memory (``store``) comes first: the key holds the profile's hash already."""
    if key in _in_memory:
        return _in_memory[key]
    where = path(key)
    if not where.exists():
        return None
    why = None
    try:
        entry = json.loads(where.read_text(encoding="utf-8"))
        if not isinstance(entry, dict) or not isinstance(entry.get("choice"), str):
            why = "it is not a tuning entry"
        elif entry.get("version") != __version__:
            why = f"it was written by softcuda {entry.get('version')}, this is {__version__}"
        elif entry.get("profile") != profile_hash(config):
            why = f"it was measured under another profile than {config.name}"
    except (OSError, ValueError) as exc:
        why = f"it cannot be read ({exc})"
    if why:
        warnings.warn(
            f"softcuda: the tuning cache entry {where} is ignored ({why}); measuring again",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return entry


def store(key: str, config: Config, entry: dict) -> Path | None:
    """Write ``entry`` (with the version and the profile's hash) under ``key``; the path, or
    None where the cache folder cannot be written: the entry is then kept in memory for this
    process (``load`` finds it there), and the first such failure for a folder is said once."""
    where = path(key)
    entry = {**entry, "version": __version__, "profile": profile_hash(config)}
    tmp = None
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tune-", dir=where.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(entry, fh, indent=1, sort_keys=True)
        os.replace(tmp, where)
    except OSError as exc:
        if tmp is not None:  # a full disk: no half-written file left behind
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _in_memory[key] = entry
        folder = str(where.parent)
        if folder not in _said:
            _said.add(folder)
            warnings.warn(
                f"softcuda: the tuning cache {folder} cannot be written ({exc.strerror or exc}): "
                "tuned choices are kept in memory for this process only (set SOFTCUDA_CACHE to "
                "a writable folder to keep them)",
                RuntimeWarning,
                stacklevel=3,
            )
        return None
    return where
