"""The machine a sweep measures: detected once, before anything is timed, and written into the
sweep's metadata (``Machine.from_meta`` reads it back for ``softcuda init --from``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import backends
from ..device import canonical_string, describe_machine, hash_fields, identity_fields
from ..errors import SoftcudaError


@dataclass
class Machine:
    """What was detected, once, before the sweep starts."""

    device_type: str  # "cuda" or "cpu"
    device_index: int
    fields: dict[str, str]
    device_hash: str
    hash_string: str
    backends: tuple[str, ...]
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.fields.get("name") or self.fields["cpu_model"]

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Machine:
        """The machine a sweep's metadata (``Sweep.write_meta``) describes."""
        fields = meta["machine"]
        return cls(
            fields["type"],
            int(fields.get("device_index", 0)),
            fields,
            meta["device_hash"],
            meta["hash_string"],
            tuple(meta["backends"]),
            dict(meta.get("unavailable") or {}),
        )


def detect(device_index: int = 0) -> Machine:
    """This machine: CUDA device ``device_index`` when CuPy and a device answer (made the
    current device), else the CPU; the backends it can run and why the others cannot."""
    ok, reason = backends.cuda_available()
    device_type = "cuda" if ok else "cpu"
    if ok:
        import cupy  # only once a device answered: a CPU-only machine never imports CuPy

        count = cupy.cuda.runtime.getDeviceCount()
        if not 0 <= device_index < count:
            raise SoftcudaError(
                f"--device {device_index}: this machine has {count} CUDA "
                f"device(s), numbered 0 to {count - 1}"
            )
        cupy.cuda.Device(device_index).use()
    elif device_index:  # the sweep would be CPU-only: profiling "GPU 1" would be a wrong label
        raise SoftcudaError(f"--device {device_index}: no CUDA device is usable here ({reason})")
    identity = identity_fields(device_type, device_index)
    usable = tuple(b for b, info in backends.BACKENDS.items() if ok or info.device == "cpu")
    unavailable = {} if ok else {b: reason for b in backends.CUDA_BACKENDS}
    return Machine(
        device_type,
        device_index,
        describe_machine(device_type, device_index),
        hash_fields(identity),
        canonical_string(identity),
        usable,
        unavailable,
    )
