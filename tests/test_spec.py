"""Sweep specs: shipped files load, ranges expand geometrically, every error names file and key."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from softcuda.errors import SpecError
from softcuda.sweep.spec import SizeRange, Spec, load_spec, spec_from_dict

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = ROOT / "sweeps"

MINIMAL = """\
name: t
ops:
  matmul:
    sizes: {start: 16, stop: 64, per_octave: 1}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "name", ["quick.yaml", "default.yaml", "stability.yaml", "matmul-dense.yaml"]
)
def test_shipped_specs_load_and_round_trip(name: str) -> None:
    spec = load_spec(SWEEPS / name)
    assert spec.name == name.removesuffix(".yaml")
    assert (spec.bus is not None) == (name in ("quick.yaml", "default.yaml"))
    # to_dict goes into the metadata file as JSON and must come back as the same spec.
    assert spec_from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_default_spec_covers_the_experiment() -> None:
    spec = load_spec(SWEEPS / "default.yaml")
    sizes = {o.op: o.sizes.values() for o in spec.ops}
    assert sizes["matmul"][0] == 16 and sizes["matmul"][-1] == 8192
    assert {"add", "mul", "relu", "exp", "sum", "max"} <= set(sizes)
    assert sizes["add"][0] == 2**8 and sizes["add"][-1] == 2**28
    assert spec.bus is not None and spec.bus.bytes.values()[-1] == 2**30
    assert spec.scan == 4  # the reference looks around its boundaries (README, "the band")


def test_defaults_and_points_order(tmp_path: Path) -> None:
    spec = load_spec(
        _write(tmp_path, MINIMAL + "  add:\n    sizes: {start: 4, stop: 8, per_octave: 1}\n")
    )
    assert spec.backends is None and spec.bus is None
    assert spec.metric == "e2e_pinned" and spec.dtype == "float32" and spec.scan == 0
    # the matmuls last: BLAS's spinning threads must not land on the elementwise points
    assert list(spec.points()) == [
        ("add", 4),
        ("add", 8),
        ("matmul", 16),
        ("matmul", 32),
        ("matmul", 64),
    ]
    assert spec.select_backends(["cpu_blas", "cuda_tiled"]) == ("cpu_blas", "cuda_tiled")


def test_select_listed_backends(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, MINIMAL + "backends: [cuda_tiled, cpu_blas]\n"))
    assert spec.select_backends(["cpu_blas", "cpu_fallback"]) == ("cpu_blas",)


def test_sizes_are_geometric_sorted_and_deduplicated() -> None:
    assert SizeRange(16, 64, 2).values() == (16, 23, 32, 45, 64)
    # Rounding makes 1, 1.19, 1.41 collide at the bottom of a fine range.
    assert SizeRange(1, 4, 4).values() == (1, 2, 3, 4)
    # A stop that is off the grid is still included.
    assert SizeRange(16, 100, 1).values() == (16, 32, 64, 100)
    assert SizeRange(7, 7, 3).values() == (7,)
    big = SizeRange(2**8, 2**28, 2).values()
    assert len(big) == 41 and big[-1] == 2**28
    assert all(a < b for a, b in zip(big, big[1:], strict=False))


BAD_CASES = [
    # (yaml text, key path expected in the message, words expected)
    ("ops: {}\n", "name", "required"),
    ("name: t\n", "ops", "required"),
    ("name: t\nops: {}\n", "ops", "at least one"),
    (MINIMAL + "colour: red\n", "colour", "unknown key"),
    (MINIMAL + "dtype: float16\n", "dtype", "float16"),
    (MINIMAL + "metric: fastest\n", "metric", "e2e_pinned"),
    (MINIMAL + "backends: some\n", "backends", '"all"'),
    (MINIMAL + "backends: [cpu_blas, gpu]\n", "backends[1]", "'gpu'"),
    (MINIMAL + "backends: [cpu_blas, cpu_blas]\n", "backends", "twice"),
    (MINIMAL + "host_memory: [managed]\n", "host_memory[0]", "'managed'"),
    (MINIMAL + "host_memory: []\n", "host_memory", "non-empty"),
    (MINIMAL + "time_budget_s: -5\n", "time_budget_s", "> 0"),
    (MINIMAL + "settle_s: -1\n", "settle_s", ">= 0"),
    (MINIMAL + "settle_s: long\n", "settle_s", "number"),
    (MINIMAL + "time_budget_s: 1e3\n", "time_budget_s", "write 1.0e3 or 1000"),
    (MINIMAL + "scan: 9\n", "scan", "<= 8"),
    (MINIMAL + "scan: -1\n", "scan", ">= 0"),
    (MINIMAL + "scan: yes\n", "scan", "integer"),
    (MINIMAL + "repetitions: {warmup: -1}\n", "repetitions.warmup", ">= 0"),
    (MINIMAL + "repetitions: {min_reps: true}\n", "repetitions.min_reps", "integer"),
    (MINIMAL + "repetitions: {min_reps: 5, max_reps: 2}\n", "repetitions.max_reps", ">= 5"),
    (MINIMAL + "repetitions: {min_time_s: fast}\n", "repetitions.min_time_s", "number"),
    (MINIMAL + "repetitions: {repeats: 3}\n", "repetitions.repeats", "unknown key"),
    (MINIMAL + "repetitions: {buffers: 0}\n", "repetitions.buffers", ">= 1"),
    (MINIMAL + "repetitions: {buffers: 9}\n", "repetitions.buffers", "<= 8"),
    (MINIMAL + "repetitions: {retries: 6}\n", "repetitions.retries", "<= 5"),
    (MINIMAL + "repetitions: {retries: -1}\n", "repetitions.retries", ">= 0"),
    (MINIMAL + "repetitions: {block_s: -1.0e-5}\n", "repetitions.block_s", ">= 0"),
    (MINIMAL + "repetitions: {block_s: 0.5}\n", "repetitions.block_s", "at most 0.01"),
    (MINIMAL + "repetitions: {block_s: short}\n", "repetitions.block_s", "number"),
    (MINIMAL + "bus: true\n", "bus", "false or a mapping"),
    (
        MINIMAL + "bus: {start_bytes: 4, stop_bytes: 2, per_octave: 1}\n",
        "bus.stop_bytes",
        "start_bytes",
    ),
    (MINIMAL + "bus: {start_bytes: 4, stop: 8, per_octave: 1}\n", "bus.stop", "unknown key"),
    (
        "name: t\nops: {conv: {sizes: {start: 1, stop: 2, per_octave: 1}}}\n",
        "ops.conv",
        "unknown op",
    ),
    ("name: t\nops: {add: {start: 1}}\n", "ops.add.start", "unknown key"),
    ("name: t\nops: {add: {}}\n", "ops.add.sizes", "missing"),
    (
        "name: t\nops: {add: {sizes: {start: 8, stop: 4, per_octave: 1}}}\n",
        "ops.add.sizes.stop",
        ">= start",
    ),
    (
        "name: t\nops: {add: {sizes: {start: 0, stop: 4, per_octave: 1}}}\n",
        "ops.add.sizes.start",
        ">= 1",
    ),
    (
        "name: t\nops: {add: {sizes: {start: 1, stop: 4, per_octave: 0.5}}}\n",
        "ops.add.sizes.per_octave",
        "integer",
    ),
    ("name: t\nops: {add: {sizes: {start: 1, stop: 4}}}\n", "ops.add.sizes.per_octave", "missing"),
]


@pytest.mark.parametrize(("text", "key", "words"), BAD_CASES)
def test_errors_name_file_and_key(tmp_path: Path, text: str, key: str, words: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}:"), message
    assert words in message
    assert "\n" not in message


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: t\nops:\n  add: [1, 2\n")
    with pytest.raises(SpecError, match=rf"^{path}:\d+: invalid YAML"):
        load_spec(path)


def test_duplicate_key_names_line(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL + "name: u\n")
    with pytest.raises(SpecError, match=rf"^{path}:5: invalid YAML \(duplicate key 'name'\)"):
        load_spec(path)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    for text in ("- 1\n", ""):
        path = _write(tmp_path, text)
        with pytest.raises(SpecError, match=rf"^{path}: the top level must be a mapping"):
            load_spec(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "nope.yaml")


def test_round_trip_of_every_field() -> None:
    data = yaml.safe_load(MINIMAL)
    data.update(
        dtype="float64",
        backends=["cpu_blas", "cuda_blas"],
        host_memory=["pageable"],
        metric="resident",
        time_budget_s=30,
        settle_s=0,
        scan=5,
        repetitions={
            "warmup": 0,
            "min_time_s": 0,
            "min_reps": 1,
            "max_reps": 1,
            "max_point_s": 2,
            "buffers": 3,
            "block_s": 0,
        },
        bus={"start_bytes": 1, "stop_bytes": 1024, "per_octave": 3},
    )
    spec = spec_from_dict(data, "d")
    assert spec.repetitions.block_s == 0.0  # 0: every call timed alone, kept as 0
    assert spec_from_dict(yaml.safe_load(MINIMAL), "m").repetitions.block_s == 5e-5
    assert isinstance(spec, Spec)
    assert spec_from_dict(spec.to_dict()) == spec
    assert spec.to_dict()["backends"] == ["cpu_blas", "cuda_blas"]


def _laughs(levels: int) -> str:
    """A "billion laughs": each level an anchored list of nine aliases of the one before."""
    lines = ["  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "name:\n" + "\n".join(lines) + "\n" + MINIMAL.split("\n", 1)[1]


def test_an_alias_bomb_is_refused_by_its_line_in_one_short_sentence(tmp_path: Path) -> None:
    """700 bytes whose error message was 351 MB (one level more: 6 GB and a MemoryError)."""
    path = _write(tmp_path, _laughs(9))
    assert path.stat().st_size < 1000
    with pytest.raises(SpecError) as info:
        load_spec(path)
    # l4 is the first level past 10,000 values (1 + 9 * 7,381): on line 6
    assert str(info.value) == f"{path}:6: aliases expand this to more than 10,000 values."


def test_a_bad_value_is_quoted_in_a_bounded_excerpt(tmp_path: Path) -> None:
    """Under the alias limit (4 levels: 7,381 values) a bad value is still long, as is a long
    string: the message quotes at most EXCERPT_CHARS of either ("…" where it is cut; a string
    keeps its two ends)."""
    for text, key in (
        (_laughs(4), "name: must be a non-empty string, not dict {"),
        (MINIMAL.replace("name: t", "name: '" + "x" * 5000 + "/'"), "name: must be letters"),
        (MINIMAL + "  " + "y" * 1000 + ": {}\n", "ops.yyyy"),  # (YAML: keys < 1024)
    ):
        with pytest.raises(SpecError) as info:
            load_spec(_write(tmp_path, text))
        message = str(info.value)
        # (< 500: an unknown op's message also lists the registry's names, variants included)
        assert key in message and len(message) < 500, message[:600]
        assert "…" in message or "..." in message


def test_aliases_that_contain_themselves_and_deep_nesting_are_one_sentence(tmp_path: Path):
    path = _write(tmp_path, "name: &a [*a]\n" + MINIMAL.split("\n", 1)[1])
    with pytest.raises(SpecError, match=r"x\.yaml:1: an alias here contains itself\.$"):
        load_spec(path)
    path = _write(tmp_path, "name: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(SpecError, match="nests collections too deeply"):
        load_spec(path)


def test_numbers_too_large_for_python_or_a_float_are_one_sentence(tmp_path: Path) -> None:
    """A 5,000-digit integer is more than Python converts from text (ValueError from PyYAML);
    1 and 400 zeros is more than a float holds (OverflowError from math.isfinite)."""
    path = _write(tmp_path, MINIMAL + "settle_s: 1" + "0" * 5000 + "\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert message.startswith(f"{path}:5: an integer of 5,001 digits") and len(message) < 200
    for key in ("settle_s", "time_budget_s"):
        path = _write(tmp_path, MINIMAL + f"{key}: 1" + "0" * 400 + "\n")
        with pytest.raises(SpecError) as info:
            load_spec(path)
        assert str(info.value).startswith(f"{path}: {key}: must be a number of at most 1.8e308")
        assert len(str(info.value)) < 200


def test_every_shipped_spec_is_documented_and_says_nothing_idle() -> None:
    """smoke.yaml was missing from method.md's table of shipped specs and design.md's layout;
    quick.yaml set retry_wait_s, which does nothing with retries: 0."""
    method = (ROOT / "docs" / "method.md").read_text()
    design = (ROOT / "docs" / "design.md").read_text()
    for path in sorted(SWEEPS.glob("*.yaml")):
        assert f"| `{path.name}` |" in method, path.name
        assert f"`{path.name}`" in design, path.name
        reps = yaml.safe_load(path.read_text()).get("repetitions", {})
        if reps.get("retries") == 0:
            assert "retry_wait_s" not in reps, path.name


def test_the_schema_in_the_docstring_names_every_op_and_variant() -> None:
    import softcuda.sweep.spec as module
    from softcuda.ops import PROFILE_OPS

    listed = module.__doc__.split("op names from", 1)[1].split("start:", 1)[0]
    assert [op for op in PROFILE_OPS if not re.search(rf"\b{op}\b", listed)] == []
