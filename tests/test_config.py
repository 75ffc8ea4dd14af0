"""CONFIG.soft: the design's example, parse/write identity, errors with file:line, fuzzing,
bucket lookup, resolution order, the stale-hash warning, atomic writes."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import softcuda as sc
from softcuda import config as C
from softcuda.backends import cuda_available
from softcuda.costs import CostModel
from softcuda.device import cpu_identity, hash_fields
from softcuda.errors import ConfigError
from tests.profiles import default_profile

DESIGN_EXAMPLE = """\
[meta]
soft_version = 0.1.0
device_hash  = <sha256 of gpu_name+compute_cap+vram+driver>
generated_at = 2026-03-18T09:00:00Z

[device]
type               = cuda
compute_capability = 8.6
vram_mb            = 8192

[ops]
# format: op_name | size_bucket -> backend
matmul | size < 128        = cpu_blas
matmul | 128 <= size < 512 = cuda_naive
matmul | size >= 512       = cuda_tiled
relu   | any               = cuda_elementwise
add    | any               = cuda_elementwise

[pool]
device     = cuda
block_size = 2097152
"""


def test_design_example_parses_verbatim():
    cfg = C.parse_config(DESIGN_EXAMPLE, "design.soft")
    assert cfg.device_type == "cuda" and cfg.block_size == 2097152
    assert [(r.lo, r.hi, r.backend) for r in cfg.rules["matmul"]] == [
        (0, 128, "cpu_blas"),
        (128, 512, "cuda_naive"),
        (512, None, "cuda_tiled"),
    ]
    assert cfg.lookup("matmul", 127).backend == "cpu_blas"
    assert cfg.lookup("matmul", 128).backend == "cuda_naive"
    assert cfg.lookup("matmul", 10**9).backend == "cuda_tiled"
    assert cfg.lookup("relu", 0).line == 16
    assert cfg.lookup("mul", 10) is None


SWITCH_LINE = "switch_us = 4096:1.90 16384:2.60 65536:4.60 262144:10.30 1048576:17.70 4194304:0"


@pytest.mark.parametrize(
    "text",
    [
        DESIGN_EXAMPLE,
        C.default_config_path().read_text(),
        DESIGN_EXAMPLE + f"\n[bus]\nlaunch_us = 5.67\n{SWITCH_LINE}\n",
    ],
)
def test_parse_of_write_is_identity(text):
    cfg = C.parse_config(text, "a.soft")
    again = C.parse_config(C.format_config(cfg), "b.soft")
    assert again == cfg
    assert C.format_config(again) == C.format_config(cfg)
    assert C.format_config(cfg).count("# format:") == 1


@st.composite
def configs(draw):
    rules = {}
    for op in draw(st.lists(st.sampled_from(["matmul", "add", "sum", "relu"]), unique=True)):
        cuts = sorted(set(draw(st.lists(st.integers(1, 10**6), max_size=4))))
        edges = [0, *cuts, None]
        backends = ["cpu_blas", "cpu_fallback"]
        rules[op] = [
            C.Rule(
                op,
                lo,
                hi,
                draw(st.sampled_from(backends)),
                note=tuple(
                    draw(st.lists(st.sampled_from(["median 1.2e-05 s", "tie"]), max_size=2))
                ),
            )
            for lo, hi in zip(edges, edges[1:])
        ]
    return C.Config(
        path="gen.soft",
        meta={"soft_version": "0.1.0", "device_hash": "portable"},
        device={"type": "cpu"},
        rules=rules,
        pool={"device": "cpu", "block_size": str(draw(st.integers(1, 2**31)))},
        bus={
            **({"h2d_pinned_gbps": "55.4"} if draw(st.booleans()) else {}),
            **({"switch_us": draw(switch_lines())} if draw(st.booleans()) else {}),
        },
    )


@st.composite
def switch_lines(draw) -> str:
    """A [bus] switch_us value: increasing byte counts, microseconds >= 0 (0 among them)."""
    sizes = sorted(draw(st.sets(st.integers(1, 2**40), min_size=1, max_size=8)))
    micro = st.one_of(st.just(0.0), st.floats(0, 1e4, allow_nan=False, allow_infinity=False))
    return " ".join(f"{b}:{draw(micro):.2f}" for b in sizes)


@settings(max_examples=60, deadline=None)
@given(configs())
def test_identity_on_generated_configs(cfg):
    assert C.parse_config(C.format_config(cfg), "gen.soft") == cfg


def _with(line_change: tuple[str, str]) -> str:
    old, new = line_change
    assert old in DESIGN_EXAMPLE
    return DESIGN_EXAMPLE.replace(old, new)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (_with(("relu   | any", "gelu   | any")), 16, "unknown op 'gelu'"),
        (_with(("= cuda_tiled", "= cuda_magic")), 15, "unknown backend 'cuda_magic'"),
        (_with(("[pool]", "[pools]")), 19, "unknown section [pools]"),
        (_with(("vram_mb  ", "vram_gb  ")), 9, "unknown key 'vram_gb'"),
        (_with(("size >= 512 ", "size >= 500 ")), 15, "overlaps"),
        (_with(("size >= 512 ", "size >= 600 ")), 15, "no bucket"),
        (_with(("128 <= size < 512", "512 <= size < 128")), 14, "inverted"),
        (_with(("= 2097152", "= 2MB")), 21, "block_size"),
        (_with(("= 2097152", "= 99999999999999999999")), 21, "at most"),
        (_with(("= 8192", "= -1")), 9, "vram_mb"),
        (_with(("= 8.6", "= eight")), 8, "compute_capability"),
        ("soft_version = 1\n[meta]\n", 1, "outside any section"),
        (_with(("add    | any", "add    | sometimes")), 17, "bucket 'sometimes'"),
        (
            _with(
                (
                    "add    | any               = cuda_elementwise",
                    "add    | any               = cuda_naive",
                )
            ),
            17,
            "does not implement add",
        ),
        (
            _with(("relu   | any               = cuda_elementwise", "relu = cuda_elementwise")),
            16,
            "expected 'op | bucket = backend'",
        ),
        (_with(("type               = cuda", "type               = tpu")), 7, "must be one of"),
        (DESIGN_EXAMPLE + "[meta]\n", 22, "appears twice"),
        (_with(("block_size = 2097152", "block_size = 1\nblock_size = 2")), 22, "twice"),
        (_with(("matmul | size < 128 ", "matmul | size < 128 \x00")), 13, "binary"),
        *(
            (DESIGN_EXAMPLE + f"[bus]\nswitch_us = {value}\n", 23, f"[bus] switch_us: {words}")
            for value, words in (
                ("", "needs at least one BYTES:MICROSECONDS point"),
                ("4096", "point '4096' is not BYTES:MICROSECONDS"),
                ("0:1.5", "point '0:1.5' is not BYTES:MICROSECONDS"),
                ("-4:1.5", "point '-4:1.5' is not BYTES:MICROSECONDS"),
                ("4096:2 1024:1", "bytes must increase, but '1024:1' follows 4096 bytes"),
                ("4096:2 4096:3", "bytes must increase, but '4096:3' follows 4096 bytes"),
                ("4096:-0.5", "microseconds '-0.5' of point '4096:-0.5' must be finite and >= 0"),
                ("4096:nan", "microseconds 'nan' of point '4096:nan' must be finite and >= 0"),
                ("1:0 4096:inf", "microseconds 'inf' of point '4096:inf' must be finite"),
                ("4096:fast", "microseconds 'fast' of point '4096:fast' is not a number"),
                ("1" * 40 + ":1", f"bytes {'1' * 40} of point '{'1' * 40}:1' are more than"),
            )
        ),
    ],
)
def test_errors_name_file_and_line(text, line, words):
    with pytest.raises(ConfigError) as info:
        C.parse_config(text, "profile.soft")
    assert info.value.line == line, str(info.value)
    assert str(info.value).startswith(f"profile.soft:{line}: ")
    assert words in str(info.value)


def test_missing_required_key_names_the_section():
    with pytest.raises(
        ConfigError,
        match=r"x.soft:19: \[pool\] is missing the required key "
        r"'block_size'",
    ):
        C.parse_config(DESIGN_EXAMPLE.replace("block_size = 2097152\n", ""), "x.soft")


def test_portable_hash_only_for_cpu_backends():
    text = DESIGN_EXAMPLE.replace("<sha256 of gpu_name+compute_cap+vram+driver>", "portable")
    with pytest.raises(ConfigError, match="only allowed for CPU backends"):
        C.parse_config(text, "p.soft")


def test_binary_file_names_file_and_line(tmp_path):
    path = tmp_path / "garbage.soft"
    path.write_bytes(b"[meta]\nsoft_version = 1\n\xff\xfe\x00\x01binary")
    with pytest.raises(ConfigError, match=r"garbage.soft:3: binary"):
        C.load_config(path)
    with pytest.raises(ConfigError, match="cannot read"):
        C.load_config(tmp_path / "missing.soft")


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(list("[]|=<>#\n abcdefgilmnoprsty_0123456789\x00.")), max_size=300
    )
)
def test_fuzz_text_only_config_errors_escape(text):
    try:
        C.parse_config(text, "fuzz.soft")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.soft")


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_bytes_only_config_errors_escape(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "f.soft"
    path.write_bytes(data)
    try:
        C.load_config(path)
    except ConfigError:
        pass


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No $SOFTCUDA_CONFIG, an empty working directory and an empty user config dir."""
    monkeypatch.delenv("SOFTCUDA_CONFIG")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(C, "_SKIP_NOTICES", set())
    user = tmp_path / "xdg" / "softcuda" / "CONFIG.soft"
    user.parent.mkdir(parents=True)
    return user


def _here() -> str:
    return default_profile(hash_fields(cpu_identity()))


def _elsewhere() -> str:
    return default_profile("0" * 64, "Far CPU")


def test_resolution_order(nowhere):
    cfg = C.load_config()
    assert Path(cfg.path) == C.default_config_path() and cfg.source == "packaged default"
    nowhere.write_text(_here())
    assert (C.load_config().path, C.load_config().source) == (str(nowhere), "user config")
    Path("CONFIG.soft").write_text(_here())
    assert (C.load_config().path, C.load_config().source) == ("CONFIG.soft", "./CONFIG.soft")
    Path("env.soft").write_text(_elsewhere())
    os.environ["SOFTCUDA_CONFIG"] = "env.soft"  # restored by the fixture's monkeypatch
    assert (C.load_config().path, C.load_config().source) == ("env.soft", "$SOFTCUDA_CONFIG")
    assert (C.load_config("env.soft").path, C.load_config("env.soft").source) == (
        "env.soft",
        "given",
    )


def test_a_found_profile_of_another_device_is_skipped_with_one_log_line(nowhere, caplog):
    Path("CONFIG.soft").write_text(_elsewhere())
    with caplog.at_level("WARNING", logger="softcuda"):
        cfg = C.load_config()
        assert cfg.source == "packaged default"
        nowhere.write_text(_here())
        assert C.load_config().source == "user config"  # the next source that fits
        for _ in range(3):
            C.load_config()  # a library user compiling in a loop hears it once per choice
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("CONFIG.soft: skipped, a profile of another device (Far CPU;")
    assert lines[0].endswith("using the packaged DEFAULT.soft")
    assert lines[1].endswith(f"using {nowhere}")
    caplog.clear()
    with caplog.at_level("WARNING", logger="softcuda"):
        C.load_config(announce=True)
    assert len(caplog.records) == 1


def test_a_user_profile_of_another_device_is_skipped_too(nowhere, caplog):
    nowhere.write_text(_elsewhere())
    with caplog.at_level("WARNING", logger="softcuda"):
        assert C.load_config().source == "packaged default"
    assert str(nowhere) in caplog.records[0].getMessage()


def test_a_found_profile_that_cannot_be_parsed_is_an_error_not_skipped(nowhere):
    Path("CONFIG.soft").write_text(_elsewhere().replace("[pool]", "[pool]\nspeed = 3"))
    with pytest.raises(ConfigError, match=r"CONFIG.soft:\d+: unknown key 'speed'"):
        C.load_config()


def test_a_profile_asked_for_is_used_as_asked_and_warns_that_it_is_stale(nowhere, caplog):
    Path("far.soft").write_text(_elsewhere())
    os.environ["SOFTCUDA_CONFIG"] = "far.soft"
    for cfg in (C.load_config(), C.load_config("far.soft")):
        assert cfg.path == "far.soft" and cfg.made_on == "Far CPU"
        with pytest.warns(C.StaleConfigWarning, match="re-run `softcuda init`"):
            sc.compile(sc.ones((2,)) + 1.0, cfg)
    assert not caplog.records  # nothing was skipped


@pytest.mark.skipif(cuda_available()[0], reason="a GPU is usable here")
def test_a_foreign_cuda_profile_fails_clearly_where_its_backends_are_missing(nowhere):
    """A GPU profile asked for on a machine without CuPy: one sentence naming what to do."""
    gpu = C.parse_config(
        DESIGN_EXAMPLE.replace("<sha256 of gpu_name+compute_cap+vram+driver>", "f" * 64), "gpu.soft"
    )
    with pytest.warns(C.StaleConfigWarning):
        with pytest.raises(
            sc.BackendUnavailable, match="relu node .* cuda_elementwise.*softcuda init"
        ):
            sc.compile(sc.relu(sc.ones((3,))), gpu)


def test_stale_hash_warns_once_and_a_matching_one_is_silent(tmp_path):
    stale = tmp_path / "stale.soft"
    stale.write_text(default_profile("0" * 64))
    cfg = C.load_config(stale)
    with pytest.warns(C.StaleConfigWarning, match="re-run `softcuda init`"):
        sc.compile(sc.ones((2,)) + 1.0, cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sc.compile(sc.ones((2,)) + 1.0, cfg)  # checked once per loaded config
        fresh = tmp_path / "fresh.soft"
        fresh.write_text(default_profile(hash_fields(cpu_identity())))
        sc.compile(sc.ones((2,)) + 1.0, C.load_config(fresh))


def test_write_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "CONFIG.soft"
    cfg = C.parse_config(DESIGN_EXAMPLE, "d.soft")
    C.write_config(cfg, target)
    assert C.load_config(target) == cfg
    before = target.read_text()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    cfg.rules["relu"] = [C.Rule("relu", 0, None, "cpu_blas")]
    with pytest.raises(OSError):
        C.write_config(cfg, target)
    assert target.read_text() == before
    assert os.listdir(tmp_path) == ["CONFIG.soft"]


def test_default_soft_covers_every_op_on_cpu():
    from softcuda.ops import CONFIGURABLE_OPS

    cfg = sc.default_config()
    assert sorted(cfg.rules) == sorted(CONFIGURABLE_OPS)
    assert {r.backend for rules in cfg.rules.values() for r in rules} <= {
        "cpu_blas",
        "cpu_fallback",
    }
    root = Path(__file__).resolve().parent.parent / "DEFAULT.soft"
    if root.exists():  # in a source checkout the top-level DEFAULT.soft is the packaged one
        assert root.read_text() == C.default_config_path().read_text()


def test_a_rewrite_keeps_the_file_mode_and_a_new_file_follows_the_umask(tmp_path):
    cfg = C.parse_config(DESIGN_EXAMPLE, "d.soft")
    target = tmp_path / "CONFIG.soft"
    old = os.umask(0o027)
    try:
        C.write_config(cfg, target)  # mkstemp alone makes it 0600
        assert target.stat().st_mode & 0o777 == 0o640
        target.chmod(0o664)
        C.write_config(cfg, target)
        assert target.stat().st_mode & 0o777 == 0o664
    finally:
        os.umask(old)


def test_a_byte_order_mark_is_read_past_and_latin1_text_is_named_as_such(tmp_path):
    path = tmp_path / "bom.soft"
    path.write_bytes(b"\xef\xbb\xbf" + DESIGN_EXAMPLE.encode())
    assert C.load_config(path) == C.parse_config(DESIGN_EXAMPLE, "d.soft")
    path.write_bytes(DESIGN_EXAMPLE.encode() + "# caf\u00e9\n".encode("latin-1"))
    line = DESIGN_EXAMPLE.count("\n") + 1
    with pytest.raises(ConfigError, match=rf"bom.soft:{line}: text that is not UTF-8"):
        C.load_config(path)


def test_what_is_not_a_regular_file_is_refused_before_reading(tmp_path):
    fifo = tmp_path / "pipe.soft"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    for path in (fifo, Path("/dev/zero"), tmp_path):
        with pytest.raises(ConfigError, match="is not a regular file"):
            C.load_config(path)
    big = tmp_path / "big.soft"
    big.write_text(C.default_config_path().read_text() + "#" * C.MAX_CONFIG_BYTES)
    with pytest.raises(ConfigError, match="big.soft: is larger than"):
        C.load_config(big)


@pytest.mark.parametrize("threads", ["0", "-2", "lots"])
def test_a_thread_count_that_is_no_count_is_a_parse_error_with_its_line(threads):
    text = (
        C.default_config_path()
        .read_text()
        .replace("[device]\n", f"[device]\ncpu_threads = {threads}\n")
    )
    with pytest.raises(
        ConfigError, match=r"t.soft:\d+: \[device\] cpu_threads: must be a positive"
    ):
        C.parse_config(text, "t.soft")


def test_more_threads_than_cores_fails_at_compile_naming_the_line(tmp_path):
    from softcuda.device import usable_cores

    text = C.default_config_path().read_text()
    text = text.replace("[device]\n", f"[device]\ncpu_threads = {usable_cores() + 1}\n")
    text = text.replace("add     | any = cpu_blas", "add     | any = cpu_threads")
    path = tmp_path / "threads.soft"
    path.write_text(text)
    line = text.splitlines().index(f"cpu_threads = {usable_cores() + 1}") + 1
    with pytest.raises(ConfigError, match=rf"threads.soft:{line}: .*this process may use 1 to"):
        sc.compile(sc.ones((3,)) + 1.0, C.load_config(path))


def test_a_profile_built_in_code_refuses_a_backend_that_lacks_the_op():
    with pytest.raises(ConfigError, match="backend cuda_naive does not implement tanh"):
        C.rules_config({"tanh": "cuda_naive"})
    with pytest.raises(ConfigError, match="backend warp_drive does not implement add"):
        C.rules_config({"add": "warp_drive"})


def test_a_stale_profile_stays_stale_on_every_compile(tmp_path):
    cfg = C.parse_config(default_profile("0" * 64), "stale.soft")
    with pytest.warns(C.StaleConfigWarning):
        assert cfg.check_device() is False
    assert cfg.check_device() is False  # the answer is kept, not turned into True


def test_the_switch_term_is_read_linear_in_log_bytes_and_clamped_outside():
    """[bus] switch_us: the measured value at a measured size, linear in log(bytes) between two
    (a 0 among them is a value like any other), the nearest point's value outside; 0 without
    the line."""
    cfg = C.parse_config(DESIGN_EXAMPLE + "[bus]\nswitch_us = 1024:2 4096:6 16384:0\n", "s.soft")
    assert CostModel(C.parse_config(DESIGN_EXAMPLE, "s.soft")).switch_s(4096) == 0.0
    assert CostModel(cfg).switch_s(1024) == pytest.approx(2e-6)
    assert CostModel(cfg).switch_s(4096) == pytest.approx(6e-6)
    assert CostModel(cfg).switch_s(16384) == 0.0
    assert CostModel(cfg).switch_s(2048) == pytest.approx(4e-6)  # halfway in log(bytes)
    assert CostModel(cfg).switch_s(8192) == pytest.approx(3e-6)
    assert CostModel(cfg).switch_s(1024 * 2**0.5) == pytest.approx(3e-6)  # a quarter of the way
    for below in (0, 1, 1023):
        assert CostModel(cfg).switch_s(below) == pytest.approx(2e-6)
    for above in (16385, 10**12):
        assert CostModel(cfg).switch_s(above) == 0.0
    one = C.parse_config(DESIGN_EXAMPLE + "[bus]\nswitch_us = 65536:10.3\n", "s.soft")
    assert (
        CostModel(one).switch_s(1)
        == CostModel(one).switch_s(65536)
        == CostModel(one).switch_s(2**30)
        == pytest.approx(10.3e-6)
    )
