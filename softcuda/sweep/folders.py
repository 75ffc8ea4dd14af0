"""The folders a sweep writes to, before it runs: made and checked writable, locked so that one
sweep at a time writes there, and whether a sweep's metadata there says it is complete.

Nothing here imports pandas: ``softcuda init`` checks these before it loads the runner, and the
command line imports this module even for ``softcuda --help``.  Invariant: one sweep at a time
writes to a device's folder and to a profile (``hold``); a second would append to the same CSV
(two resumes) or race for the profile, and two sweeps at once time each other's work.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on Windows: there a second sweep is not refused
    fcntl = None  # type: ignore[assignment]

from ..errors import SoftcudaError

LOCK_NAME = ".softcuda-init.lock"
"""The lock file a sweep holds in the device's results folder while it runs."""


def check_writable(folder: Path, what: str = "") -> None:
    """A SoftcudaError unless ``folder`` is a folder that exists and this user can write to,
    saying which of those it is not; ``what`` (an option) comes first where given."""
    where = f"{what}: {folder}" if what else str(folder)
    if not folder.exists():
        raise SoftcudaError(f"{where} does not exist; make the folder first")
    if not folder.is_dir():
        raise SoftcudaError(f"{where} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SoftcudaError(f"{where} is not a folder this user can write to")


def make_folder(folder: Path) -> None:
    """Make the folder a sweep writes its rows to, and check that this user can write there:
    before the sweep settles and measures, so that a path that cannot take the rows is said at
    once, not after the wait."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # exist_ok covers folders only
        raise SoftcudaError(
            f"{folder} is a file, not a folder the sweep's rows can go to"
        ) from None
    except OSError as exc:
        raise SoftcudaError(f"{folder} cannot be made a folder ({exc.strerror})") from None
    check_writable(folder)


@contextlib.contextmanager
def hold(path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on the lock file ``path`` (``flock``, which the OS releases when
    the process ends, however it ends) with this process's id in it; a SoftcudaError naming
    the process that holds it already.  ``what`` names what the lock guards.

    The file goes when the lock is released, so that a folder keeps no lock file between
    sweeps; a process that locked a file just unlinked by its holder sees that it no longer
    lies at ``path`` and tries again (a file left by a killed process is simply locked)."""
    if fcntl is None:
        yield
        return
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise SoftcudaError(
                f"{what} is in use by another softcuda init (process {holder}); two sweeps at "
                "once would time each other's work and write to one place: wait for it to end"
            ) from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder unlinked it as we opened it: take the new one
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # before the lock goes: a waiter then sees the file has gone
        os.close(fd)


def is_complete(path: Path) -> bool:
    """Whether the metadata at ``path`` says its sweep is complete (False where unreadable)."""
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(meta, dict) and meta.get("complete") is True
