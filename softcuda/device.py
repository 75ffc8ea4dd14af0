"""Hardware detection and the device hash.

The device hash is the sha256 (hex) of a canonical string, fields in this order, joined by "|":

    CUDA profile:  gpu_name=<name>|compute_capability=<major.minor>|vram_mb=<MiB>|driver=<version>
    CPU profile:   cpu_model=<model>|cpu_cores=<logical cores>|blas=<name version>

``driver`` is the NVIDIA driver version as nvidia-smi prints it (e.g. 580.159.04) when
nvidia-smi answers, otherwise ``cuda-driver-api-<N>`` from cudaDriverGetVersion.  Nothing here
runs at import time: the hash is computed the first time a config is used, and CuPy is imported
only inside the functions that ask a GPU.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import tempfile
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .version import __version__

try:  # optional: without it the BLAS thread count is the CPU count
    from threadpoolctl import threadpool_info
except ImportError:
    threadpool_info = None


@lru_cache(maxsize=1)
def cuda_available() -> tuple[bool, str]:
    """(True, "") when CuPy imports and a CUDA device answers, else (False, why not)."""
    import importlib.util

    # before the import: CuPy makes its cache folder as it imports, and one that cannot be made
    # (a read-only home, a file in the way) fails the import itself.  Said only once a device
    # answers: a machine without one has no GPU kernels to compile anywhere.
    said = cupy_cache_in_memory() if importlib.util.find_spec("cupy") is not None else None
    try:
        import cupy
    except ImportError:
        return False, "CuPy is not installed (pip install 'softcuda[cuda12]' or '[cuda13]')"
    except Exception as exc:  # a broken CuPy install raises all sorts of things
        return False, f"CuPy failed to import ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        text = str(exc)
        if "driver" in text.lower() or "libcuda" in text.lower():
            return False, f"no CUDA driver ({text})"
        return False, f"no CUDA device ({text})"
    if count < 1:
        return False, "no CUDA device"
    if said:  # once: this function's answer is kept for the process
        warnings.warn(said, RuntimeWarning, stacklevel=3)
    return True, ""


def cupy_cache_in_memory(environ=os.environ) -> str | None:
    """Where CuPy's kernel cache (``CUPY_CACHE_DIR``, else ~/.cupy/kernel_cache) cannot be
    written (a read-only home), tell CuPy to compile in memory (``CUPY_CACHE_IN_MEMORY=1``,
    which it reads at each compile) and return the sentence that says so; None where the
    folder takes a file or memory was asked for already.  Without it CuPy's first compile
    fails with an OSError deep inside a plan's build, and where the folder cannot even be
    made, ``import cupy`` fails: CUPY_CACHE_DIR then names a temporary folder of this
    process's, removed at exit, which CuPy makes and leaves empty (where memory was asked for
    already too; where no temporary folder can be made either, CuPy's import says why)."""
    folder = Path(environ.get("CUPY_CACHE_DIR") or Path.home() / ".cupy" / "kernel_cache")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".softcuda-probe-"):
            pass
        return None
    except OSError as e:
        why = e.strerror or str(e)
    import atexit
    import shutil

    try:
        spare = tempfile.mkdtemp(prefix="softcuda-cupy-")
    except OSError:
        pass
    else:
        atexit.register(shutil.rmtree, spare, True)
        environ["CUPY_CACHE_DIR"] = spare
    if environ.get("CUPY_CACHE_IN_MEMORY"):
        return None
    environ["CUPY_CACHE_IN_MEMORY"] = "1"
    return (
        f"softcuda: CuPy's kernel cache {folder} cannot be written ({why}): GPU kernels are "
        "compiled in memory, for this process only (set CUPY_CACHE_DIR to a writable folder "
        "to keep them)"
    )


def canonical_string(fields: dict[str, Any]) -> str:
    return "|".join(f"{key}={value}" for key, value in fields.items())


def hash_fields(fields: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_string(fields).encode("utf-8")).hexdigest()


@lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


@lru_cache(maxsize=1)
def blas_info() -> dict[str, Any]:
    """numpy's BLAS: name, version and thread count (threadpoolctl when installed)."""
    info: dict[str, Any] = {"name": "unknown", "version": "", "threads": os.cpu_count() or 1}
    try:
        config = np.show_config(mode="dicts")  # numpy >= 1.26
        blas = config.get("Build Dependencies", {}).get("blas", {})
        info["name"] = blas.get("name", "unknown")
        info["version"] = blas.get("version", "")
    except (TypeError, AttributeError):
        pass
    for pool in threadpool_info() if threadpool_info is not None else ():
        if pool.get("user_api") == "blas":
            info["threads"] = pool.get("num_threads", info["threads"])
            break
    return info


def host_memory_bytes() -> tuple[int, int]:
    """(total, available) bytes of host memory; available is the kernel's MemAvailable, what
    can be taken without swapping (0 where unknown)."""
    total = available = 0
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError, AttributeError):
        pass
    return total, available


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which a container or ``taskset``
    narrows), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cpu_identity() -> dict[str, Any]:
    blas = blas_info()
    return {
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count() or 1,
        "blas": f"{blas['name']} {blas['version']}".strip(),
    }


def _nvidia_smi(index: int, query: str) -> str | None:
    """One nvidia-smi query about CUDA device ``index``.

    nvidia-smi numbers GPUs by PCI bus while CUDA follows CUDA_DEVICE_ORDER and
    CUDA_VISIBLE_DEVICES, so the device is addressed by its PCI bus id first, and by its index
    only if that fails.
    """
    targets = []
    try:
        import cupy

        targets.append(str(cupy.cuda.Device(index).pci_bus_id))
    except Exception:  # no CuPy, or a CuPy without the attribute: the index will do
        pass
    targets.append(str(index))
    for target in targets:
        try:
            out = subprocess.run(
                ["nvidia-smi", f"--id={target}", f"--query-gpu={query}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        if out:
            return out
    return None


def _nvidia_smi_driver(index: int) -> str | None:
    return _nvidia_smi(index, "driver_version")


@lru_cache(maxsize=8)
def gpu_identity(index: int = 0) -> dict[str, Any]:
    """Name, compute capability, VRAM and driver of CUDA device ``index`` (needs CuPy)."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(index)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    driver = _nvidia_smi_driver(index)
    if driver is None:
        driver = f"cuda-driver-api-{cupy.cuda.runtime.driverGetVersion()}"
    return {
        "gpu_name": name,
        "compute_capability": f"{props['major']}.{props['minor']}",
        "vram_mb": int(props["totalGlobalMem"]) // (1024 * 1024),
        "driver": driver,
    }


def current_hash(device_type: str, index: int = 0) -> tuple[str | None, str]:
    """This machine's hash for a profile of ``device_type``, and a short description of why."""
    if device_type == "cuda":
        ok, reason = cuda_available()
        if not ok:
            return None, f"a CUDA profile, but {reason}"
    fields = identity_fields(device_type, index)
    label = fields["gpu_name"] if device_type == "cuda" else fields["cpu_model"]
    return hash_fields(fields), f"this machine is {label}"


def _nvidia_smi_pcie(index: int) -> str | None:
    query = "pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max"
    out = _nvidia_smi(index, query)
    if out is None:
        return None
    parts = [p.strip() for p in out.split(",")]
    if len(parts) != 4 or not all(parts):
        return None
    return f"gen {parts[0]} x{parts[1]} (max gen {parts[2]} x{parts[3]})"


def describe_machine(
    device_type: str, index: int = 0, kernel_hash: str | None = None
) -> dict[str, str]:
    """Every field ``softcuda init`` records, as text, in [device] order (see config.KEYS).

    The CUDA fields appear only for a CUDA profile; a git diff of two profiles then shows which
    of them changed.  ``kernel_hash`` is the CUDA sources' (``backends.cuda_kernels``), which
    the caller reads: this module sits below the backends.
    """
    fields: dict[str, str] = {"type": device_type}
    if device_type == "cuda":
        import cupy

        gpu = gpu_identity(index)
        runtime = cupy.cuda.runtime.runtimeGetVersion()
        fields.update(
            name=gpu["gpu_name"],
            compute_capability=gpu["compute_capability"],
            vram_mb=str(gpu["vram_mb"]),
            driver_version=gpu["driver"],
            cuda_runtime=f"{runtime // 1000}.{runtime % 1000 // 10}",
            pcie=_nvidia_smi_pcie(index) or "unknown (nvidia-smi did not answer)",
            device_index=str(index),
            cupy=cupy.__version__,
        )
    cpu = cpu_identity()
    blas = blas_info()
    fields.update(
        cpu_model=cpu["cpu_model"],
        cpu_cores=str(cpu["cpu_cores"]),
        blas=cpu["blas"] or "unknown",
        blas_threads=str(blas["threads"]),
        cpu_threads=str(usable_cores()),
        numpy=np.__version__,
        softcuda=f"{__version__} (python {sys.version.split()[0]})",
    )
    if device_type == "cuda" and kernel_hash is not None:
        fields["kernel_hash"] = kernel_hash
    return fields


def identity_fields(device_type: str, index: int = 0) -> dict[str, object]:
    """The fields the device hash is computed over, for a profile of ``device_type``."""
    return gpu_identity(index) if device_type == "cuda" else cpu_identity()


def slug(text: str) -> str:
    """A folder name for a device: 'NVIDIA H200' -> 'nvidia-h200'."""
    out = "".join(c if c.isalnum() else "-" for c in text.lower())
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-") or "device"
