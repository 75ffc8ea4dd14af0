"""What moved between two CONFIG.soft profiles: device fields, bucket assignments, thresholds.

``diff_configs(a, b)`` compares two parsed profiles and returns a ``ConfigDiff``;
``format_diff`` renders it for a terminal, ``ConfigDiff.to_dict`` for JSON.

Definitions
- An *assignment* is one rule, (op, bucket [lo, hi), backend).  ``same_assignments`` is True when
  both profiles hold exactly the same set of them: the notes above the rules (measured times),
  the rules' line numbers, and the [meta], [device], [pool], [bus] and [sweep] values do not
  count.  Splitting a bucket in two with the same backend on both sides counts as a difference
  (the rules differ), though no size changes backend; the diff then shows no threshold move.
- A *threshold* is a size where an op's backend changes: the lower bound of a bucket whose
  backend differs from the bucket below it (consecutive buckets with one backend are merged
  first).  Thresholds of the two profiles are paired by their (below, above) backend pair, in
  size order; the ones left over are paired in size order when they share the backend below or
  the one above (``cpu_blas -> cuda_naive`` becoming ``cpu_blas -> cuda_tiled`` is the same
  crossover, moved and re-targeted); anything still unpaired is reported as added or removed.
- Device fields are every key of [device] and [meta].device_hash; they are reported, never
  counted (the same assignments on two machines is a finding, not a difference).  Changed keys
  of [pool], [bus] and [sweep] are listed as *settings*, also not counted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from softcuda.config import Config, Rule


@dataclass(frozen=True)
class FieldChange:
    """One key whose value differs; ``None`` where the key is absent from that profile."""

    section: str
    key: str
    old: str | None
    new: str | None


@dataclass(frozen=True)
class BucketChange:
    """A bucket [lo, hi) (hi None = infinity) ``added``, ``removed`` or ``changed`` backend."""

    kind: str
    bucket: str
    lo: int
    hi: int | None
    old_backend: str | None
    new_backend: str | None


@dataclass(frozen=True)
class ThresholdMove:
    """A size where the backend changes, in one or both profiles (None where absent).

    ``ratio`` is new_size / old_size when both exist (> 1: the boundary moved up).
    """

    old_size: int | None
    new_size: int | None
    ratio: float | None
    old_below: str | None
    old_above: str | None
    new_below: str | None
    new_above: str | None

    @property
    def kind(self) -> str:
        if self.old_size is None:
            return "added"
        if self.new_size is None:
            return "removed"
        return "same" if self.old_size == self.new_size else "moved"


@dataclass(frozen=True)
class OpDiff:
    """How one op's rules differ between two profiles that both configure it."""

    op: str
    buckets: tuple[BucketChange, ...]
    backends_added: tuple[str, ...]
    backends_removed: tuple[str, ...]
    thresholds: tuple[ThresholdMove, ...]


@dataclass(frozen=True)
class ConfigDiff:
    a: str
    b: str
    device: tuple[FieldChange, ...]
    settings: tuple[FieldChange, ...]
    ops: tuple[OpDiff, ...]
    ops_only_a: tuple[str, ...]
    ops_only_b: tuple[str, ...]
    same_assignments: bool

    def to_dict(self) -> dict:
        out = asdict(self)
        for op_out, op in zip(out["ops"], self.ops):
            for t_out, t in zip(op_out["thresholds"], op.thresholds):
                t_out["kind"] = t.kind
        return out


def diff_configs(a: Config, b: Config) -> ConfigDiff:
    """Compare profile ``a`` (old) with ``b`` (new); see the module docstring."""
    device = _field_changes(a, b, "device")
    old_hash, new_hash = a.meta.get("device_hash"), b.meta.get("device_hash")
    if old_hash != new_hash:
        device.insert(0, FieldChange("meta", "device_hash", old_hash, new_hash))
    settings = [c for s in ("pool", "bus", "sweep") for c in _field_changes(a, b, s)]
    common = sorted(set(a.rules) & set(b.rules))
    ops = [d for d in (_op_diff(op, a.rules[op], b.rules[op]) for op in common) if d is not None]
    only_a = tuple(sorted(set(a.rules) - set(b.rules)))
    only_b = tuple(sorted(set(b.rules) - set(a.rules)))
    return ConfigDiff(
        a=a.path,
        b=b.path,
        device=tuple(device),
        settings=tuple(settings),
        ops=tuple(ops),
        ops_only_a=only_a,
        ops_only_b=only_b,
        same_assignments=not ops and not only_a and not only_b,
    )


def _field_changes(a: Config, b: Config, section: str) -> list[FieldChange]:
    old, new = getattr(a, section), getattr(b, section)
    keys = list(dict.fromkeys([*old, *new]))
    changed = [k for k in keys if old.get(k) != new.get(k)]
    return [FieldChange(section, k, old.get(k), new.get(k)) for k in changed]


def _op_diff(op: str, old: list[Rule], new: list[Rule]) -> OpDiff | None:
    old_map = {(r.lo, r.hi): r for r in old}
    new_map = {(r.lo, r.hi): r for r in new}
    if {k: r.backend for k, r in old_map.items()} == {k: r.backend for k, r in new_map.items()}:
        return None
    buckets = []
    for key in sorted(set(old_map) | set(new_map), key=lambda k: (k[0], k[1] is None, k[1])):
        o, n = old_map.get(key), new_map.get(key)
        if o is not None and n is not None:
            if o.backend != n.backend:
                buckets.append(BucketChange("changed", o.bucket, *key, o.backend, n.backend))
        elif o is not None:
            buckets.append(BucketChange("removed", o.bucket, *key, o.backend, None))
        elif n is not None:
            buckets.append(BucketChange("added", n.bucket, *key, None, n.backend))
    old_backends = {r.backend for r in old}
    new_backends = {r.backend for r in new}
    return OpDiff(
        op=op,
        buckets=tuple(buckets),
        backends_added=tuple(sorted(new_backends - old_backends)),
        backends_removed=tuple(sorted(old_backends - new_backends)),
        thresholds=tuple(
            t for t in _pair_thresholds(_thresholds(old), _thresholds(new)) if t.kind != "same"
        ),
    )


def _thresholds(rules: list[Rule]) -> list[tuple[int, str, str]]:
    """(size, backend below, backend above) at every change of backend, in size order."""
    ordered = sorted(rules, key=lambda r: r.lo)
    return [
        (cur.lo, prev.backend, cur.backend)
        for prev, cur in zip(ordered, ordered[1:])
        if prev.backend != cur.backend
    ]


def _pair_thresholds(
    old: list[tuple[int, str, str]], new: list[tuple[int, str, str]]
) -> list[ThresholdMove]:
    pairs: list[tuple[tuple[int, str, str] | None, tuple[int, str, str] | None]] = []
    left_old, left_new = list(old), list(new)
    # Pass 1: the same backend pair on both sides, matched in size order.
    for t in old:
        match = next((u for u in left_new if u[1:] == t[1:]), None)
        if match is not None:
            pairs.append((t, match))
            left_old.remove(t)
            left_new.remove(match)
    # Pass 2: one backend in common (below or above), in size order.
    for t in list(left_old):
        match = next((u for u in left_new if u[1] == t[1] or u[2] == t[2]), None)
        if match is not None:
            pairs.append((t, match))
            left_old.remove(t)
            left_new.remove(match)
    pairs += [(t, None) for t in left_old] + [(None, u) for u in left_new]
    moves = []
    for o, n in pairs:
        ratio = n[0] / o[0] if o is not None and n is not None else None
        moves.append(
            ThresholdMove(
                old_size=o[0] if o else None,
                new_size=n[0] if n else None,
                ratio=ratio,
                old_below=o[1] if o else None,
                old_above=o[2] if o else None,
                new_below=n[1] if n else None,
                new_above=n[2] if n else None,
            )
        )
    return sorted(moves, key=lambda m: m.old_size or m.new_size or 0)


# --- text ----------------------------------------------------------------------------------------


def format_diff(diff: ConfigDiff, name_a: str, name_b: str) -> str:
    """A readable report of ``diff``, ``name_a`` being the old profile and ``name_b`` the new."""
    lines = [f"--- {name_a}", f"+++ {name_b}", ""]
    if diff.device:
        lines.append("device (reported, not counted):")
        lines += [f"  {_field(c)}" for c in diff.device]
    else:
        lines.append("device: same")
    if diff.settings:
        lines.append("settings (reported, not counted):")
        lines += [f"  {_field(c)}" for c in diff.settings]
    lines.append("")
    if diff.ops_only_a:
        lines.append(f"ops only in {name_a}: {', '.join(diff.ops_only_a)}")
    if diff.ops_only_b:
        lines.append(f"ops only in {name_b}: {', '.join(diff.ops_only_b)}")
    for op in diff.ops:
        lines.append(f"{op.op}:")
        for c in op.buckets:
            if c.kind == "changed":
                lines.append(f"  ~ {c.bucket}: {c.old_backend} -> {c.new_backend}")
            elif c.kind == "removed":
                lines.append(f"  - {c.bucket} = {c.old_backend}")
            else:
                lines.append(f"  + {c.bucket} = {c.new_backend}")
        if op.backends_added:
            lines.append(f"  backends added:   {', '.join(op.backends_added)}")
        if op.backends_removed:
            lines.append(f"  backends removed: {', '.join(op.backends_removed)}")
        for t in op.thresholds:
            lines.append(f"  threshold {_threshold(t)}")
    if diff.ops_only_a or diff.ops_only_b or diff.ops:
        lines.append("")
    if diff.same_assignments:
        lines.append("assignments: same")
    else:
        n = len(diff.ops) + len(diff.ops_only_a) + len(diff.ops_only_b)
        lines.append(f"assignments: DIFFER ({n} op{'s' if n != 1 else ''})")
    return "\n".join(lines) + "\n"


def _field(c: FieldChange) -> str:
    def show(v: str | None) -> str:
        return "(absent)" if v is None else v

    return f"[{c.section}] {c.key}: {show(c.old)} -> {show(c.new)}"


def _threshold(t: ThresholdMove) -> str:
    old_pair = f"{t.old_below} -> {t.old_above}"
    new_pair = f"{t.new_below} -> {t.new_above}"
    if t.kind == "added":
        return f"added at size {t.new_size:,}: {new_pair}"
    if t.kind == "removed":
        return f"removed at size {t.old_size:,}: {old_pair}"
    pair = old_pair if old_pair == new_pair else f"{old_pair} (now {new_pair})"
    return f"{pair}: size {t.old_size:,} -> {t.new_size:,} (x{t.ratio:.3g})"
