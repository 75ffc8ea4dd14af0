"""Misuse gets one sentence, never a raw Python error: bad arguments to the library's entry points
(a ``wrt`` that is no tensor, a number beyond a float64, a negative seed, an array of another
dtype), what ``softcuda run`` prints for values that are not finite, and the README sections the
shipped files cite."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from softcuda_cli import main

import softcuda as sc

ROOT = Path(__file__).resolve().parent.parent


# ---- softcuda run: values that are not finite ---------------------------------------------------


def _run_text(tmp_path: Path, body: str) -> str:
    script = tmp_path / "graph.py"
    script.write_text("import numpy as np\nimport softcuda as sc\n" + body)
    result = CliRunner().invoke(main, ["run", str(script), "--repeat", "1"])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_run_prints_nan_inf_and_minus_inf_as_numpy_does(tmp_path):
    out = _run_text(
        tmp_path,
        "def build():\n"
        "    x = sc.tensor([1.0, -1.0, 0.0, 2.0])\n"
        "    return {'q': x / sc.tensor([0.0, 0.0, 0.0, 1.0])}\n",
    )
    line = next(line for line in out.splitlines() if line.startswith("q:"))
    assert "[inf, -inf, nan, 2]" in line and "(3 not finite)" in line, line


def test_run_prints_the_head_of_an_output_with_nothing_finite(tmp_path):
    out = _run_text(
        tmp_path,
        "def build():\n"
        "    x = sc.tensor([1.0, -1.0, 0.0])\n"
        "    return {'q': x / sc.tensor([0.0, 0.0, 0.0])}\n",
    )
    line = next(line for line in out.splitlines() if line.startswith("q:"))
    assert "[inf, -inf, nan]" in line and "(3 not finite)" in line, line


# ---- one sentence for bad arguments -------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda x: sc.grad(x.sum(), None), "grad: wrt must be a Tensor or a sequence of Tensors"),
        (lambda x: sc.grad(x.sum(), 5), "grad: wrt must be a Tensor or a sequence of Tensors"),
        (lambda x: x * 10**400, "mul: the number (401 digits) is beyond a float64"),
        (lambda x: 10**400 + x, "add: the number (401 digits) is beyond a float64"),
        (lambda x: x - -(10**400), "sub: the number (401 digits) is beyond a float64"),
        (lambda x: sc.div(10**400, x), "div: the number (401 digits) is beyond a float64"),
        # past Python's 4300-digit limit on str(int), which the digit count must not trip
        (lambda x: x**10**5000, "pow: the exponent (5001 digits) is beyond a float64"),
        (lambda x: sc.tensor(10**400), "tensor: the number (401 digits) is beyond a float64"),
        (lambda x: x.assign([1, 2, -(10**400)]), "assign: the number (401 digits) is beyond"),
        (lambda x: sc.randn(3, seed=-1), "randn: seed must be None or a non-negative int, got -1"),
        (
            lambda x: sc.randn(3, seed=1.5),
            "randn: seed must be None or a non-negative int, got 1.5",
        ),
        (
            lambda x: sc.randn(3, seed="a"),
            "randn: seed must be None or a non-negative int, got 'a'",
        ),
        (lambda x: sc.randn(3, seed=True), "randn: seed must be None or a non-negative int, got"),
        (lambda x: sc.add(1.0, 2.0), "add: one operand must be a Tensor, got float and float"),
        (lambda x: sc.mul(np.ones(3), 2.0), "mul: one operand must be a Tensor, got ndarray and"),
    ],
)
def test_misuse_is_one_sentence(make, words):
    with pytest.raises(sc.ShapeError) as info:
        make(sc.ones((3,)))
    message = str(info.value)
    assert words in message and "\n" not in message, message


def test_integers_past_int64_but_within_float64_are_numbers():
    assert sc.tensor(10**30).numpy() == np.float32(1e30)
    np.testing.assert_array_equal(sc.tensor([1, 10**30]).numpy(), np.float32([1, 1e30]))
    assert sc.randn(2, seed=np.int64(3)).numpy().tolist() == sc.randn(2, seed=3).numpy().tolist()


def test_objects_that_are_not_numbers_are_still_refused():
    for values in ([None, 1.0], [1, None], [10**400, "1"], [10**30, 1j]):
        with pytest.raises(sc.ShapeError, match="values of dtype object are not real numbers"):
            sc.tensor(values)


# ---- the dtype rule: numbers are weak, arrays are held to the tensor's dtype --------------------


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize(
    "number", [2.0, 2, np.float64(2.0), np.float32(2.0), np.int64(2), np.int8(2)]
)
def test_a_number_takes_the_tensor_s_dtype(dt, number):
    x = sc.ones((3,), dtype=dt)
    for y in (x + number, number - x, x * number, number / x):
        assert y.dtype == dt
    np.testing.assert_array_equal((x * number).numpy(), np.full(3, 2.0, dt))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize(
    ("tensor_dt", "array"),
    [
        (np.float32, np.array([1.0, 2.0, 3.0])),
        (np.float64, np.array([1.0, 2.0, 3.0], np.float32)),
        (np.float32, np.arange(3)),
        (np.float32, np.array(2.0)),  # a 0-d array is an array, not a number
    ],
)
def test_an_array_of_another_dtype_is_refused_naming_both(tensor_dt, array, left):
    x = sc.ones((3,), dtype=tensor_dt)
    with pytest.raises(sc.ShapeError) as info:
        (array + x) if left else (x + array)
    message = str(info.value)
    dt = np.dtype(tensor_dt)
    assert message.startswith("add: ") and "\n" not in message, message
    assert f"{array.dtype} (shape {array.shape})" in message, message
    assert f"{dt} (shape (3,))" in message, message
    assert f".astype(np.{dt})" in message, message


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_an_array_of_the_tensor_s_dtype_combines(dt):
    x = sc.ones((3,), dtype=dt)
    y = np.array([1.0, 2.0, 3.0], dt) * x
    assert y.dtype == dt and y.numpy().tolist() == [1.0, 2.0, 3.0]
    z = x - np.array([1.0, 2.0, 3.0]).astype(dt)
    assert z.numpy().tolist() == [0.0, -1.0, -2.0]


# ---- the README sections the shipped files cite -------------------------------------------------


def _readme_sections() -> set[str]:
    """The README's headings and its bold run-in headings (``**Where a config comes from.**``)."""
    text = (ROOT / "README.md").read_text()
    headings = re.findall(r"^#+ +(.+?) *$", text, flags=re.M)
    run_in = re.findall(r"^\*\*(.+?)\.?\*\*", text, flags=re.M)
    return {s.strip() for s in headings + run_in}


def _citations(path: Path) -> list[str]:
    """The sections ``path`` cites as ``see README, "..."``, across comment line breaks."""
    text = re.sub(r"\n\s*#\s*", " ", path.read_text())
    return re.findall(r"see README, \"([^\"]+)\"", text)


def test_default_soft_cites_readme_sections_that_exist():
    cited = _citations(ROOT / "softcuda" / "DEFAULT.soft")
    assert cited, "DEFAULT.soft cites no README section"
    missing = set(cited) - _readme_sections()
    assert not missing, f"DEFAULT.soft cites README sections that do not exist: {missing}"


def test_the_code_cites_readme_sections_that_exist():
    files = sorted((ROOT / "softcuda").rglob("*.py")) + sorted((ROOT / "cli").rglob("*.py"))
    sections = _readme_sections()
    missing = {(f.name, c) for f in files for c in _citations(f) if c not in sections}
    assert not missing, f"citations of README sections that do not exist: {missing}"
