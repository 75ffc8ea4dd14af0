"""Fusable groups: which nodes of a graph can run as one generated kernel, as plain data.

A group is elementwise ops (unary, binary and pow, broadcasting their inputs, constants as
kernel arguments) on one device, of one dtype, all of one shape -- the shape the kernel iterates
-- optionally ended by one reduction (sum, mean or max over every element or along one axis).
Its root is its last member and its output: every other member's value is read by members of
the group alone, so it never reaches memory, except a group's extra outputs: a value read after
the plan's steps (an output, an update's new value) that one member reads too, written by the
same kernel.  A value read by another node outside (another group, another device) ends a
group: it is its root, written once.

``form`` makes the groups of a graph from a rule saying where each node may be fused (its
device, or None: not fusable there).  The planner asks it with every fusable node on one
device, to price a chain as fused on either device before it cuts; the fuse stage asks it again
with the devices the placement chose.  ``statements`` is the one description of a group's
arithmetic that both code generators (native.py for the CPU, cuda_fused.py for the GPU) turn
into their language; ``layout`` says how a kernel walks the group's inputs.

Why these limits: a member of another shape (a bias broadcast inside the group) would be
recomputed for every element of the larger shape; a reduction in the middle would need a second
pass; views change the walk.  Each ends a group instead, and runs as it does unfused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import ops as _ops

Tensor = Any
"""A graph node (softcuda.tensor.Tensor): this module reads only its fields, and sits below
the node's module so that the backends' code generators can read a group too."""

FUSED_FAMILIES = ("unary", "binary", "power")
"""The ops a group's elementwise members may be (by ``OpDef.family``)."""
REDUCING = ("sum", "mean", "max")
"""The reductions a group may end with."""
MAX_MEMBERS = 32
"""The most ops one group holds: a longer chain is cut into groups of this many (a kernel of
thousands of statements would take the compiler minutes, and spill its registers)."""


def is_constant(node: Tensor) -> bool:
    """A Python number in the graph: a one-element leaf that carries its value."""
    return node.is_leaf and "value" in node.attrs and node.size == 1


def is_scalar_argument(node: Tensor, consumer: Tensor) -> bool:
    """Whether ``node`` reaches ``consumer``'s kernel as a number rather than as a buffer: a
    constant (a Python number in the graph) read by a binary elementwise op."""
    return (
        is_constant(node)
        and _ops.OPS[consumer.op].family == "binary"
        and not all(is_constant(t) for t in consumer.inputs)  # kernels take one number at most
    )


def is_view(node: Tensor) -> bool:
    """A node that shares its input's buffer: a transpose, or a reshape of contiguous data
    (compile makes no step for it, and placement gives it its input's device)."""
    if node.op == "transpose":
        return True
    src = node.inputs[0] if node.inputs else None
    return node.op == "reshape" and src is not None and _ops.is_contiguous(src.dims, src.stride)


def fusable(node: Tensor) -> bool:
    """Whether ``node``'s op may be a member of a group (its place in the graph aside)."""
    if node.is_leaf or node.op not in _ops.OPS:
        return False
    if node.op in REDUCING:
        return node.size > 0 and node.inputs[0].size > 0
    return _ops.OPS[node.op].family in FUSED_FAMILIES and node.size > 0


@dataclass(eq=False)
class Group:
    """Members in dependency order (the root last), the buffers they read from outside the
    group, the numbers they take, the shape the kernel iterates, and the device."""

    members: list[Tensor]
    device: str
    # made from the members: the buffers read from outside, and (member, the constant leaf or
    # None for pow's exponent) for each number the kernel takes
    inputs: list[Tensor] = field(init=False)
    scalars: list[tuple[Tensor, Tensor | None]] = field(init=False)
    # what the cost model predicts for the group, and for its members one by one (nan: unpriced)
    predicted_s: float = float("nan")
    unfused_s: float = float("nan")
    _statements: list | None = field(default=None, repr=False)
    # members other than the root whose values the kernel writes too (outputs, updates' values
    # read after the plan's steps), in order
    extras: list = field(default_factory=list)
    # a backend's description of the group as bound (its arrays' walk), kept from the build
    # that compiles a plan's groups to their binding
    bound: object = field(default=None, repr=False)

    def __post_init__(self) -> None:
        inside = {id(m) for m in self.members}
        seen: set[int] = set()
        self.inputs, self.scalars = [], []
        for member in self.members:
            if member.op == "pow":
                self.scalars.append((member, None))
            for t in member.inputs:
                if id(t) in inside:
                    continue
                if is_scalar_argument(t, member):
                    self.scalars.append((member, t))
                elif id(t) not in seen:
                    seen.add(id(t))
                    self.inputs.append(t)

    @property
    def root(self) -> Tensor:
        return self.members[-1]

    @property
    def reduce(self) -> Tensor | None:
        """The reduction that ends the group, or None."""
        return self.root if self.root.op in REDUCING else None

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape the kernel iterates: the elementwise members' shape."""
        root = self.root
        return root.inputs[0].dims if self.reduce is not None else root.dims

    @property
    def size(self) -> int:
        return _ops.numel(self.shape)

    @property
    def arrays(self) -> float:
        """The elements its kernel moves (inputs read once, output written once), over its
        size: what ``CostModel.group_s`` scales a three-array add by."""
        written = self.root.size + sum(m.size for m in self.extras)
        return (sum(t.size for t in self.inputs) + written) / max(1, self.size)

    @property
    def dtype(self):
        return self.root.dtype

    @property
    def ops(self) -> list[str]:
        """The members' ops as the cost model prices them (``ops.priced_op``)."""
        return [_ops.priced_op(m) for m in self.members]

    def scalar_values(self) -> list[float]:
        """The numbers the kernel takes, in ``statements``' order of s0, s1, ..."""
        return [
            float(member.attrs["exponent"]) if leaf is None else float(leaf.attrs["value"])
            for member, leaf in self.scalars
        ]


def consumers(order: list[Tensor]) -> dict[int, list[Tensor]]:
    """id(node) -> the distinct nodes of ``order`` that read it."""
    found: dict[int, list[Tensor]] = {}
    for node in order:
        for t in dict.fromkeys(node.inputs):
            found.setdefault(id(t), []).append(node)
    return found


def form(
    order: list[Tensor],
    kept: set[int],
    device_of: Callable[[Tensor], str | None],
    readers: dict[int, list[Tensor]] | None = None,
) -> list[Group]:
    """The groups of two members or more in ``order``: each fusable node (``device_of`` gives
    its device, None where it may not be fused) takes into its group every input group that
    only it reads, on its device, of its dtype and of the shape it iterates.  ``kept`` holds
    the ids of values read outside the plan's nodes (outputs, updates' new values): such a value
    read by one node of its shape and device joins that node's group as one of the group's
    extra outputs, written by the same kernel (an optimizer's new moments join its parameter's
    update), unless the group ends in a reduction; otherwise it ends its group."""
    readers = consumers(order) if readers is None else readers
    group_of: dict[int, list[Tensor]] = {}  # id(member) -> its group's members (root last)
    device: dict[int, str] = {}
    extra: set[int] = set()  # members whose value the group writes too (read after the plan)
    for node in order:
        if not fusable(node):
            continue
        where = device_of(node)
        if where is None:
            continue
        reducing = node.op in REDUCING
        shape = node.inputs[0].dims if reducing else node.dims
        taken: list[list[Tensor]] = []
        for t in dict.fromkeys(node.inputs):
            mine = group_of.get(id(t))
            if (
                mine is None
                or mine[-1] is not t
                or t.op in REDUCING
                or id(t) in kept
                and reducing
                or device[id(t)] != where
                or t.dims != shape
                or t.dtype != node.dtype
                or sum(len(m) for m in taken) + len(mine) >= MAX_MEMBERS
                or [r for r in readers.get(id(t), ()) if r is not node]
            ):
                continue
            taken.append(mine)
            if id(t) in kept:  # an output or an update's new value: written by the group too
                extra.add(id(t))
        if reducing and any(id(m) in extra for mine in taken for m in mine):
            taken = []  # a group that writes several values ends with none reduced
        if reducing and taken and not _reducible(taken[0] + [node], where):
            taken = []  # the walk it needs cannot be had: the reduction runs alone
        # the largest list taken grows in place (a chain never copies its members)
        taken.sort(key=len, reverse=True)
        members = taken[0] if taken else []
        for other in taken[1:]:
            members[:0] = other
        members.append(node)
        group_of[id(node)] = members
        for other in taken[1:]:
            for m in other:
                group_of[id(m)] = members
        device[id(node)] = where
    position = {id(n): i for i, n in enumerate(order)}
    found, seen = [], set()
    for members in group_of.values():
        if len(members) > 1 and id(members[-1]) not in seen:
            seen.add(id(members[-1]))
            members[:-1] = sorted(members[:-1], key=lambda n: position[id(n)])
            group = Group(members, device[id(members[-1])])
            group.extras = [m for m in members[:-1] if id(m) in extra]
            found.append(group)
    return found


def _reducible(members: list[Tensor], device: str) -> bool:
    """Whether a group ending in a reduction has a walk its device's kernels cover: every
    element, or an axis whose walk collapses to (outer, len, inner); on the GPU only whole rows
    (inner 1) or one row (outer 1, inner 1), since a column reduction fused into one thread per
    output would walk long columns alone (reduce.cu's column kernels split them)."""
    found = layout(members, members[-1].inputs[0].dims)
    if found is None:
        return False
    if device == "cuda" and found[0] == "axis":
        outer, _, inner = found[1]
        return inner == 1
    return True


# ---- the arithmetic, once, for both code generators ------------------------------------------


def statements(group: Group) -> list[tuple[str, str, tuple[str, ...]]]:
    """(variable, op, arguments) per elementwise member, in order: the arguments are ``in<k>``
    (the group's k-th input, read at the element), ``s<j>`` (its j-th number) or ``t<i>`` (an
    earlier member's value).  The reduction, if any, reduces the last variable.  Made once
    per group."""
    if group._statements is None:
        group._statements = _statements(group)
    return group._statements


def _statements(group: Group) -> list[tuple[str, str, tuple[str, ...]]]:
    names: dict[int, str] = {id(t): f"in{k}" for k, t in enumerate(group.inputs)}
    numbers = {
        (id(m), id(leaf) if leaf is not None else 0): f"s{j}"
        for j, (m, leaf) in enumerate(group.scalars)
    }
    found = []
    for i, member in enumerate(group.members):
        if member.op in REDUCING:
            break
        args = []
        for t in member.inputs:
            key = (id(member), id(t))
            args.append(numbers[key] if key in numbers else names[id(t)])
        if member.op == "pow":
            args.append(numbers[(id(member), 0)])
        names[id(member)] = f"t{i}"
        found.append((f"t{i}", member.op, tuple(args)))
    return found


def broadcast_strides(t: Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``t``'s strides (in elements) as it is read at each index of ``shape``: 0 along a
    dimension it broadcasts over."""
    lead = len(shape) - t.ndims
    out = []
    for i, d in enumerate(shape):
        j = i - lead
        if j < 0 or t.dims[j] == 1 and d != 1:
            out.append(0)
        else:
            out.append(t.stride[j] if t.dims[j] != 1 else 0)
    return tuple(out)


def walk(shape: tuple[int, ...], strides: list[tuple[int, ...]], axis: int | None) -> tuple | None:
    """How a kernel walks ``shape`` read by operands of ``strides`` (in elements, 0 where one
    broadcasts): with nothing reduced, or every element, or one row (the other dimensions all
    1), ("flat", dims, strides per operand) with the dimensions collapsed
    (``ops.collapse_dims``); reduced along ``axis``, ("axis", (outer, len, inner), an
    (outer, len, inner) stride per operand), or None where some operand's walk cannot be put
    in that form."""
    if axis is not None and all(d == 1 for i, d in enumerate(shape) if i != axis):
        axis = None  # one row: reduced as everything
    if axis is None:
        dims, walks = _ops.collapse_dims(shape, strides)
        return ("flat", dims, walks)
    outer_dims, outer = _ops.collapse_dims(shape[:axis], [s[:axis] for s in strides])
    inner_dims, inner = _ops.collapse_dims(shape[axis + 1 :], [s[axis + 1 :] for s in strides])
    if len(outer_dims) > 1 or len(inner_dims) > 1:
        return None
    walks = [(o[0], s[axis], i[0]) for o, s, i in zip(outer, strides, inner)]
    return ("axis", (outer_dims[0], shape[axis], inner_dims[0]), walks)


def layout(members: list[Tensor], shape: tuple[int, ...]) -> tuple | None:
    """The walk (``walk``) of the group of ``members`` (root last) over ``shape``, from its
    inputs' own strides."""
    group = Group(members, "")
    strides = [broadcast_strides(t, shape) for t in group.inputs]
    root = members[-1]
    return walk(shape, strides, root.attrs.get("axis") if root.op in REDUCING else None)


def extra_variables(group: Group) -> list[str]:
    """The statement variables (``statements``) of the group's extra outputs, in order."""
    return [f"t{group.members.index(m)}" for m in group.extras]


def kernel_key(group: Group, ctype: str, form: str, dims: tuple, classes: tuple) -> str:
    """What a generated kernel depends on, hashed: the arithmetic, the dtype, the walk's form,
    its number of dimensions and each input's stride class, the reduction, how many numbers it
    takes and which values it writes besides the root; never the numbers or the sizes, which
    it takes as arguments."""
    text = repr(
        (statements(group), ctype, form, len(dims), classes,
         group.root.op if group.reduce is not None else "", len(group.scalars),
         extra_variables(group))
    )  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def refused(group: Group, where: str, error: str) -> str:
    """The sentence for a group whose generated code a compiler refused (``where``: "" or
    " for the GPU"): its members' ops, its inputs' shapes and dtype, the compiler's first
    error line, and how to run it unfused."""
    ops = ", ".join(m.op for m in group.members)
    shapes = " and ".join(str(tuple(t.dims)) for t in group.inputs) or "no array input"
    return (
        f"the fused group [{ops}] of {np.dtype(group.root.dtype).name} {shapes} did not "
        f"compile{where}: {error}; compile(..., fuse=False) or `softcuda run --no-fuse` runs it "
        "op by op"
    )
