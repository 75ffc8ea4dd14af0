"""The machine a sweep measures: detected once, before anything is timed, and written into the
sweep's metadata (``Machine.from_meta`` reads it back for ``softcuda init --from``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import backends
from ..backends import cuda_kernels
from ..config import KEYS
from ..device import canonical_string, describe_machine, hash_fields, identity_fields
from ..errors import DataError, SoftcudaError, excerpt

DEVICE_KEYS = KEYS["device"]
"""What a machine field may hold: the check of the profile's [device] line it becomes."""
ONE_LINE = "one line of printable text"
"""What every value that becomes a line of the profile must be (``str.isprintable``)."""


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
    def from_meta(cls, meta: dict[str, Any], source: str = "the metadata") -> Machine:
        """The machine a sweep's metadata (``Sweep.write_meta``) describes; a DataError naming
        ``source`` and the key where it does not describe one as ``softcuda init`` writes it
        (each machine field is checked as the profile's [device] line it becomes, and every
        value that becomes a line must be one: else the error would name the profile)."""

        def bad(key: str, problem: str) -> DataError:
            return DataError(f"{source}: {key} {problem}, so it does not describe a machine")

        fields = meta.get("machine")
        if not isinstance(fields, dict):
            raise bad("machine", f"is {excerpt(fields)}, not an object of fields")
        for key, value in fields.items():
            if key not in DEVICE_KEYS:
                raise bad(f"machine.{excerpt(key)}", "is not a field softcuda records")
            try:
                DEVICE_KEYS[key](value if isinstance(value, str) else None)
            except (ValueError, TypeError):
                raise bad(f"machine.{key}", f"is {excerpt(value)}") from None
            if not value.isprintable():  # a profile's line would end inside it
                raise bad(f"machine.{key}", f"is {excerpt(value)}, not {ONE_LINE}")
        if "type" not in fields:
            raise bad("machine.type", "is missing")
        if not (fields.get("name") or fields.get("cpu_model")):
            raise bad("machine", "names neither a GPU (name) nor a CPU (cpu_model)")
        for key in ("device_hash", "hash_string"):
            if not isinstance(meta.get(key), str) or not meta[key]:
                raise bad(key, f"is {excerpt(meta.get(key))}, not a non-empty string")
            if not meta[key].isprintable():
                raise bad(key, f"is {excerpt(meta[key])}, not {ONE_LINE}")
        ids = meta.get("backends")
        if not isinstance(ids, list) or not all(
            isinstance(b, str) and b in backends.BACKENDS
            for b in ids  # ([1] is unhashable)
        ):
            raise bad("backends", f"is {excerpt(ids)}, not a list of backend ids")
        unavailable = meta.get("unavailable") or {}
        if not isinstance(unavailable, dict):
            raise bad("unavailable", f"is {excerpt(unavailable)}, not an object")
        return cls(
            fields["type"],
            int(fields.get("device_index", 0)),
            fields,
            meta["device_hash"],
            meta["hash_string"],
            tuple(ids),
            dict(unavailable),
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
        describe_machine(
            device_type,
            device_index,
            cuda_kernels.source_hash() if device_type == "cuda" else None,
        ),
        hash_fields(identity),
        canonical_string(identity),
        usable,
        unavailable,
    )
