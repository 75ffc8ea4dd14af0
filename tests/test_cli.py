"""The command line, through click's CliRunner and through a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from softcuda_cli import main

import softcuda
from softcuda.config import default_config_path
from softcuda.device import cpu_model
from tests.profiles import default_profile, short_profile

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0 and softcuda.__version__ in result.output


def test_help_documents_exit_codes():
    result = invoke("--help")
    assert result.exit_code == 0
    assert "Exit codes" in result.output and "2  usage or input error" in result.output


def test_the_command_line_loads_no_pandas_until_a_command_needs_it():
    """pandas took about 40% of `softcuda --help` (init imported the sweep's storage for its
    lock): the commands import it when they run."""
    probe = "import sys, softcuda_cli; print([m for m in sys.modules if m.startswith('pandas')])"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"


def test_verify_default_passes_and_names_the_config():
    result = invoke("verify")
    assert result.exit_code == 0, result.output
    assert str(default_config_path()) in result.output and "verify: ok" in result.output
    assert "matmul" in result.output and "cpu_blas" in result.output


def test_verify_json():
    result = invoke("verify", "--json", "--config", str(default_config_path()))
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] and report["source"] == "--config"
    assert {c["op"] for c in report["checks"]} >= {"matmul", "add", "sum"}
    assert all(c["error"] <= c["tolerance"] for c in report["checks"])


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("[meta]\nsoft_version = 0.1.0\n[ops]\nfoo | any = cpu_blas\n", "bad.soft:4: unknown op"),
        ("[meta]\nsoft_version = banana\n", "bad.soft:2: [meta] soft_version: must be a version"),
        ("[meta]\ngenerated_at = yesterday\n", "bad.soft:2: [meta] generated_at: must be a UTC"),
        (
            "[bus]\nh2d_pinned_gbps = -3\n",
            "bad.soft:2: [bus] h2d_pinned_gbps: must be a number > 0",
        ),
        (
            "[bus]\nswitch_us = 4096:2.5 1024:1.9\n",
            "bad.soft:2: [bus] switch_us: bytes must increase, but '1024:1.9' follows 4096 bytes",
        ),
        ("[sweep]\nelapsed_s = -1\n", "bad.soft:2: [sweep] elapsed_s: must be a number >= 0"),
        ("[ops]\nadd | size < 10 = cpu_blas\n", "bad.soft:2: add: sizes >= 10 have no bucket"),
        ("key = value\n", "bad.soft:1: line 'key = value' is outside any section"),
    ],
)
def test_verify_bad_config_is_one_sentence_exit_2(tmp_path, content, words):
    path = tmp_path / "bad.soft"
    path.write_text(content)
    result = invoke("verify", "--config", str(path))
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


def test_verify_stale_hash_fails_with_exit_1(tmp_path):
    text = (
        default_config_path()
        .read_text()
        .replace("device_hash  = portable", "device_hash  = " + "f" * 64)
    )
    path = tmp_path / "other.soft"
    path.write_text(text)
    result = invoke("verify", "--config", str(path))
    assert result.exit_code == 1, result.output
    assert "DOES NOT MATCH" in result.output and "softcuda init" in result.output


def test_verify_fails_when_a_backend_is_wrong(monkeypatch):
    import numpy as np

    from softcuda.backends import cpu_fallback

    monkeypatch.setitem(cpu_fallback._UNARY, "exp", np.expm1)
    result = invoke("verify")
    assert result.exit_code == 1
    assert "FAILED" in result.output


def test_run_shows_plan_times_pool_and_outputs():
    result = invoke("run", str(EXAMPLES / "mlp.py"), "--repeat", "2")
    assert result.exit_code == 0, result.output
    for words in (
        "decided by",
        "matmul",
        "time per node",
        "arenas",
        "loss: scalar float32",
        "logits: 256x10",
    ):
        assert words in result.output


def test_run_explain_runs_nothing_and_shows_shared_nodes_once():
    result = invoke("run", str(EXAMPLES / "shared.py"), "--explain")
    assert result.exit_code == 0, result.output
    assert result.output.count(" tanh ") == 1 and "time per node" not in result.output
    assert "view of" in result.output


def test_run_json():
    result = invoke("run", str(EXAMPLES / "shared.py"), "--json", "--repeat", "1")
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert {"plan", "pool", "outputs"} <= set(data)
    assert data["outputs"]["output[0]"]["shape"] == [512]
    assert all("median_s" in row for row in data["plan"])


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (None, "no such graph script"),
        ("x = 1\n", "defines no build() function"),
        ("def build():\n    raise ValueError('bad width')\n", "line 2: ValueError: bad width"),
        ("def build(:\n", "SyntaxError"),
        (
            "def build():\n    return 3\n",
            "must return a Tensor, a tuple or a dict of Tensors (it returned int)",
        ),
        (
            "import softcuda as sc\ndef build():\n    return (sc.ones((2,)), 5)\n",
            "(every output must be a Tensor, but output 1 is a int)",
        ),
        ("def build():\n    return {}\n", "(no outputs given: the dict is empty)"),
        (
            "import softcuda as sc\ndef build():\n    return sc.ones((2,3)) + sc.ones((4,))\n",
            "(2, 3) and (4,)",
        ),
        ("import sys\ndef build():\n    sys.exit(3)\n", "called sys.exit(3)"),
        (
            "import softcuda as sc\ndef build():\n    return sc.max(sc.ones((0, 3)))\n",
            "nothing to reduce",
        ),
        (
            "class Stop(BaseException):\n    pass\ndef build():\n    raise Stop('no')\n",
            "line 4: Stop: no",
        ),
        (
            "import softcuda as sc\ndef build():\n    return {('a', 1): sc.ones(2)}\n",
            "a dict's names must be strings, but one is ('a', 1)",
        ),
        (
            "import softcuda as sc\ndef build():\n    return {1: sc.ones(2), '1': sc.ones(2)}\n",
            "a dict's names must be strings, but one is 1",
        ),
    ],
)
def test_run_bad_scripts_exit_2(tmp_path, body, words):
    script = tmp_path / "graph.py"
    if body is not None:
        script.write_text(body)
    result = invoke("run", str(script))
    assert result.exit_code == 2, result.output
    assert words in result.output and "graph.py" in result.output
    assert "Traceback" not in result.output


def test_a_build_that_moves_the_working_directory_or_edits_sys_path_is_undone(tmp_path):
    script = tmp_path / "graph.py"
    script.write_text(
        "import os, sys\nimport softcuda as sc\n"
        "def build():\n    os.chdir('/')\n    sys.path.clear()\n    return sc.ones(2) * 3.0\n"
    )
    before = (os.getcwd(), list(sys.path))
    result = invoke("run", str(script), "--repeat", "1")
    assert result.exit_code == 0, result.output
    assert (os.getcwd(), list(sys.path)) == before


def _run_json(tmp_path, body: str) -> dict:
    """``softcuda run --json`` of a script with ``body``, read as strict JSON."""
    script = tmp_path / "graph.py"
    script.write_text("import numpy as np\nimport softcuda as sc\n" + body)
    result = invoke("run", str(script), "--json", "--repeat", "1")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))


def test_run_json_is_strict_json_with_nan_outputs(tmp_path):
    out = _run_json(
        tmp_path, "def build():\n    return {'bad': sc.log(sc.tensor([-1.0, 0.0, 2.0]))}\n"
    )
    bad = out["outputs"]["bad"]
    assert bad["not_finite"] == 2 and bad["head"][:2] == [None, None]
    assert bad["min"] == bad["max"] == pytest.approx(0.6931, rel=1e-4)


def test_run_rejects_bad_usage():
    result = invoke("run", str(EXAMPLES / "mlp.py"), "--repeat", "0")
    assert result.exit_code == 2


def test_real_subprocess(tmp_path):
    ok = subprocess.run(
        [sys.executable, "-m", "softcuda_cli", "verify"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    assert "verify: ok" in ok.stdout
    bad = tmp_path / "bad.soft"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary")
    fail = subprocess.run(
        [sys.executable, "-m", "softcuda_cli", "verify", "--config", str(bad)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert fail.returncode == 2
    assert fail.stderr.startswith("error: ") and "bad.soft:1" in fail.stderr
    assert "Traceback" not in fail.stderr and len(fail.stderr.strip().splitlines()) == 1
    plain = subprocess.run(
        [sys.executable, str(EXAMPLES / "mlp.py")], capture_output=True, text=True, cwd=tmp_path
    )
    assert plain.returncode == 0 and plain.stdout.startswith("loss")


def _foreign_profile(folder: Path) -> Path:
    """A valid CPU profile of a device that is not this machine, as ./CONFIG.soft."""
    path = folder / "CONFIG.soft"
    path.write_text(default_profile("e" * 64, "Far CPU"))
    return path


def _fresh_env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    env.pop("SOFTCUDA_CONFIG", None)
    return env


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_runs_beside_a_profile_of_another_device(tmp_path, example):
    """As on a fresh clone without a GPU: the repository's ./CONFIG.soft is another machine's.
    Plain python and ``softcuda run`` both skip it with one warning line and run."""
    if example == "digits.py":  # its data set comes with the [digits] extra
        pytest.importorskip("sklearn", reason="scikit-learn is not installed (the [digits] extra)")
    _foreign_profile(tmp_path)
    env = _fresh_env(tmp_path)
    plain = subprocess.run(
        [sys.executable, str(EXAMPLES / example)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.splitlines() == [
        "CONFIG.soft: skipped, a profile of another device (Far CPU; this machine is "
        f"{cpu_model()}); using the packaged DEFAULT.soft"
    ]
    run = subprocess.run(
        [sys.executable, "-m", "softcuda_cli", "run", str(EXAMPLES / example), "--repeat", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert (
        run.stderr.startswith("warning: CONFIG.soft: skipped") and len(run.stderr.splitlines()) == 1
    )
    assert "(packaged default)" in run.stdout.splitlines()[0]


def test_verify_skips_a_found_foreign_profile_but_fails_it_when_asked_for(tmp_path, monkeypatch):
    profile = _foreign_profile(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SOFTCUDA_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    found = invoke("verify")
    assert found.exit_code == 0, found.output
    assert "warning: CONFIG.soft: skipped" in found.output and "verify: ok" in found.output
    asked = invoke("verify", "--config", str(profile))
    assert asked.exit_code == 1 and "DOES NOT MATCH" in asked.output


def test_the_library_from_the_repository_root_runs_on_a_machine_the_profile_is_not_for(tmp_path):
    """``(sc.ones(2) + 1).numpy()`` where ./CONFIG.soft is the committed reference profile."""
    root = EXAMPLES.parent
    done = subprocess.run(
        [sys.executable, "-c", "import softcuda as sc; print((sc.ones(2) + 1).numpy())"],
        capture_output=True,
        text=True,
        cwd=root,
        env=_fresh_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2. 2.]"


def test_pinned_host_memory_without_cuda_is_one_sentence():
    from softcuda.backends import cuda_available

    if cuda_available()[0]:
        pytest.skip("a GPU is usable here")
    result = invoke("run", str(EXAMPLES / "mlp.py"), "--host-memory", "pinned")
    assert result.exit_code == 2 and "use pageable host memory" in result.output


def test_plot_to_an_unwritable_folder_is_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    csv = next(EXAMPLES.parent.glob("results/*/sweep-default-*.csv.gz"), None)
    if csv is None:
        pytest.skip("no committed sweep")
    result = invoke("plot", str(csv), "--op", "sum", "--out", str(blocker / "figs"))
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_ctrl_c_in_a_subcommand_is_exit_130_and_one_line(tmp_path, monkeypatch):
    from softcuda_cli import run as run_cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_cli, "load_graph", interrupted)
    result = invoke("run", str(tmp_path / "any.py"))
    assert result.exit_code == 130 and "interrupted: softcuda run stopped" in result.output


def test_verify_fails_a_profile_whose_settings_this_machine_cannot_run(tmp_path):
    from softcuda.backends import cuda_available
    from softcuda.device import usable_cores

    text = default_config_path().read_text().replace("[device]\n", "[device]\ncpu_threads = 999\n")
    if not cuda_available()[0]:
        text = text.replace("host_memory = pageable", "host_memory = pinned")
    path = tmp_path / "settings.soft"
    path.write_text(text)
    result = invoke("verify", "--config", str(path))
    assert result.exit_code == 1, result.output
    assert (
        f"cpu_threads = 999, but this process may use 1 to {usable_cores()} cores" in result.output
    )
    if not cuda_available()[0]:
        assert "host_memory = pinned (line" in result.output and "needs CUDA" in result.output


def test_verify_of_a_fifo_or_a_device_is_one_sentence(tmp_path):
    fifo = tmp_path / "pipe.soft"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        result = invoke("verify", "--config", path)
        assert result.exit_code == 2 and "is not a regular file" in result.output


HUGE = "import softcuda as sc\ndef build():\n    return sc.ones((10**6, 1)) + sc.ones((1, 10**6))\n"


def test_a_plan_too_large_for_this_machine_is_one_sentence_and_explaining_takes_nothing(tmp_path):
    script = tmp_path / "huge.py"
    script.write_text(HUGE)
    ran = invoke("run", str(script))
    assert ran.exit_code == 2 and "Traceback" not in ran.output
    assert "the plan needs one host pageable arena of 3.6 TiB (4000000000000 bytes)" in ran.output
    assert "this machine has" in ran.output
    explained = invoke("run", str(script), "--explain")
    assert explained.exit_code == 0, explained.output
    assert "arenas: host 3.6 TiB" in explained.output


def test_explain_needs_none_of_the_profile_s_backends(tmp_path):
    from softcuda.backends import cuda_available

    if cuda_available()[0]:
        pytest.skip("a GPU is usable here")
    profile = EXAMPLES.parent / "softcuda" / "DEFAULT.soft"
    text = profile.read_text().replace(
        "add     | any = cpu_blas", "add     | any = cuda_elementwise"
    )
    gpu = tmp_path / "gpu.soft"
    gpu.write_text(text.replace("device_hash  = portable", "device_hash  = " + "a" * 64))
    result = invoke("run", str(EXAMPLES / "mlp.py"), "--config", str(gpu), "--explain")
    assert result.exit_code == 0, result.output
    assert "cuda_elementwise" in result.output and "h2d" in result.output


def test_verify_refuses_a_block_size_larger_than_the_machine(tmp_path):
    text = default_config_path().read_text()
    text = text.replace("block_size = 2097152", f"block_size = {1 << 40}")
    path = tmp_path / "block.soft"
    path.write_text(text)
    result = invoke("verify", "--config", str(path))
    assert result.exit_code == 1, result.output
    assert (
        f"block_size = {1 << 40}" in result.output
        and "of host memory this machine" in result.output
    )


def test_verify_names_the_ops_a_gpu_profile_left_to_default_soft(tmp_path):
    """Absent ops, and ops whose note says init copied DEFAULT.soft's rule, are not measured."""
    gpu = short_profile(
        "add | any = cuda_elementwise\n"
        "# not measured by sweep 'quick': DEFAULT.soft's choice\nexp | any = cpu_blas",
        device_type="cuda",
        device_hash="d" * 64,
    )
    path = tmp_path / "gpu.soft"
    path.write_text(gpu)
    result = invoke("verify", "--config", str(path), "--json")
    report = json.loads(result.output[result.output.index("{") :])
    want = [op for op in softcuda.ops.CONFIGURABLE_OPS if op != "add"]
    assert report["unmeasured"] == want and "exp" in want
    assert f"not measured: {', '.join(want)}" in invoke("verify", "--config", str(path)).output


def test_run_json_survives_outputs_whose_float32_mean_would_overflow(tmp_path):
    out = _run_json(
        tmp_path, "def build():\n    return sc.tensor(np.full(8, 3e38, np.float32)) * 1.0\n"
    )
    assert out["outputs"]["output"]["mean"] == pytest.approx(3e38, rel=1e-6)


@pytest.mark.skipif(os.cpu_count() < 2, reason="one core: nothing to hand off")
def test_verify_checks_cpu_threads_on_its_threads(tmp_path, monkeypatch):
    """verify runs cpu_threads' checks as the profile would: on the native kernels (not
    cpu_fallback's stand-in), each given the profile's thread count as its most."""
    from softcuda.backends import native
    from tests.native_helpers import require_native

    require_native()
    given, made = [], []
    real = native.kernel

    def kernel(op, attrs, inputs, out, threads):
        given.append((op, threads))
        run = real(op, attrs, inputs, out, threads)
        made.append(run)
        return run

    monkeypatch.setattr(native, "kernel", kernel)
    path = tmp_path / "threads.soft"
    path.write_text(short_profile("add | any = cpu_threads", device="cpu_threads = 2\n"))
    result = invoke("verify", "--config", str(path))
    assert result.exit_code == 0, result.output
    assert given and {t for _, t in given} == {2}  # the profile's two threads
    assert "add" in {op for op, _ in given}
    # every kernel was a native entry point bound to its arrays, none a fallback
    assert made and all(run is not None and hasattr(run, "arrays") for run in made)
    assert all(run.func.__name__.startswith("sc_") for run in made)


def test_verify_reports_a_thread_count_too_large_here_once_and_runs_nothing_with_it(tmp_path):
    """A profile from a larger machine (cpu_threads above this one's cores): the setting fails,
    naming its line, every check on cpu_threads says it was not run, the other backends are
    still checked, and there is no traceback."""
    from softcuda.device import usable_cores

    threads = usable_cores() + 1
    path = tmp_path / "big.soft"
    path.write_text(
        short_profile(
            "add | any = cpu_threads\nneg | any = cpu_fallback", device=f"cpu_threads = {threads}\n"
        )
    )
    result = invoke("verify", "--config", str(path))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert f"cpu_threads = {threads} (line 7) FAILED" in result.output
    (add,) = [line for line in result.output.splitlines() if line.startswith("add ")]
    assert f"not run: cpu_threads = {threads} (line 7) cannot be used here" in add
    (neg,) = [line for line in result.output.splitlines() if line.startswith("neg ")]
    assert neg.rstrip().endswith("ok")


def test_init_names_each_bus_figure_a_cuda_profile_lacks_and_the_command_that_adds_it():
    """A CUDA profile without [bus] launch_us or switch_us (a failed calibration, or a sweep
    from before it measured them) gets one note per missing line; a CPU profile gets none."""
    from softcuda_cli.init import calibration_notes

    from softcuda.config import load_config

    # the H200 profile as its sweep wrote it (the root CONFIG.soft may be this machine's by now)
    root = Path(__file__).resolve().parent.parent
    profile = load_config(root / "results" / "nvidia-h200" / "CONFIG-as-measured.soft")
    assert profile.device_type == "cuda" and "launch_us" in profile.bus
    profile.bus["switch_us"] = "4096:2.0"
    assert calibration_notes(profile, "P.soft") == []
    del profile.bus["switch_us"]
    (note,) = calibration_notes(profile, "P.soft")
    assert "no [bus] switch_us" in note and "`python -m softcuda.sweep.switch P.soft`" in note
    del profile.bus["launch_us"]
    notes = calibration_notes(profile, "P.soft")
    assert [n.split()[5] for n in notes] == ["launch_us", "switch_us"]
    cpu = load_config(Path(softcuda.__file__).parent / "DEFAULT.soft")
    assert cpu.device_type == "cpu" and calibration_notes(cpu, "D.soft") == []
