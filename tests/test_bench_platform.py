"""The benchmark scripts' `--platform`: the timing subprocesses run JAX where it says (CPU by default)."""

import os

import pytest

from benchmarks import _common


@pytest.fixture
def clean_platform(monkeypatch):
    # setenv first, so that the variable --platform sets is removed again at the end of the test
    monkeypatch.setenv(_common.PLATFORM_VAR, "cpu")
    monkeypatch.delenv(_common.PLATFORM_VAR)
    monkeypatch.setenv("JAX_PLATFORMS", "")  # what the parent runs on does not leak into the children
    monkeypatch.setattr(_common, "backend_problem", lambda platform: None)  # as on a machine that has it


def test_a_platform_jax_cannot_start_on_is_one_line(monkeypatch, capsys):
    """Without the backend every timing child failed on JAX's bare `assert _default_backend is not None`."""
    assert _common.backend_problem("cpu") is None  # the real probe, on a backend every machine has
    monkeypatch.setenv(_common.PLATFORM_VAR, "cpu")
    monkeypatch.setattr(_common, "backend_problem", lambda platform: "AssertionError")
    with pytest.raises(SystemExit):
        _common.parser("x").parse_args(["--platform", "cuda"])
    assert "--platform cuda: JAX has no cuda backend here" in capsys.readouterr().err


def test_children_run_on_the_cpu_by_default(clean_platform):
    args = _common.parser("x").parse_args([])
    assert args.platform == "cpu"
    assert _common.child_env()["JAX_PLATFORMS"] == "cpu"
    assert _common.machine_info()["timed_on"] == "cpu"


def test_platform_reaches_the_children(clean_platform, monkeypatch):
    monkeypatch.setattr(_common, "gpu_names", lambda: ["GPU 0: test"])
    args = _common.parser("x").parse_args(["--platform", "cuda"])
    assert args.platform == "cuda"
    env = _common.child_env()
    assert env["JAX_PLATFORMS"] == "cuda"
    assert env["PATH"] == os.environ["PATH"]  # the rest of the environment is kept
    info = _common.machine_info()
    assert info["timed_on"] == "cuda" and info["gpus"] == ["GPU 0: test"]


def test_a_script_that_times_in_its_own_process_records_its_own_backend(clean_platform, monkeypatch):
    """--platform sets the children's platform: an in-process script's GPU run was recorded as timed on "cpu"
    (and, here, a CPU run after --platform cuda as timed on cuda)."""
    import jax

    monkeypatch.setattr(_common, "gpu_names", lambda: ["GPU 0: test"])
    _common.parser("x").parse_args(["--platform", "cuda"])
    assert _common.machine_info()["timed_on"] == "cuda"
    info = _common.machine_info(here=True)
    assert info["timed_on"] == jax.default_backend() == info["backend"]
    assert ("gpus" in info) == (info["timed_on"] != "cpu")  # the GPUs are listed only where it ran on one


def test_unknown_platform_is_refused(clean_platform, capsys):
    with pytest.raises(SystemExit):
        _common.parser("x").parse_args(["--platform", "gpu"])
    assert "--platform" in capsys.readouterr().err


def test_platform_does_not_outlive_its_test():
    assert _common.PLATFORM_VAR not in os.environ


def test_checkout_ab_children_import_their_own_checkout(clean_platform, monkeypatch, tmp_path):
    from benchmarks import checkout_ab

    other = tmp_path / "site"
    other.mkdir()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(_common.__file__)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([repo, str(other)]))
    _common.parser("x").parse_args(["--platform", "cuda"])
    env = checkout_ab.sample_env()
    assert env["PYTHONPATH"] == str(other) and env["JAX_PLATFORMS"] == "cuda"
    monkeypatch.setenv("PYTHONPATH", repo)
    assert "PYTHONPATH" not in checkout_ab.sample_env()


def test_hlo_launches_counts_loop_trips_and_kernels():
    """`benchmarks.hlo_launches` (BENCHMARKS.md section 6's launch counts) on a program whose loops are known."""
    import jax
    import jax.numpy as jnp

    from benchmarks import hlo_launches

    def f(x):
        def inner(c, _):
            return jnp.sin(c) * 2.0 + jnp.cos(c), None

        def outer(c, _):
            return jax.lax.scan(inner, c, None, length=8)[0] @ jnp.ones((4, 4)), None

        return jax.lax.scan(outer, x, None, length=5)[0]

    text = jax.jit(f).lower(jnp.ones((3, 4))).compile().as_text()
    result = hlo_launches.count(text)
    trips = [(loop["depth"], loop["trips"], loop["total_trips"]) for loop in result["loops"]]
    assert trips == [(0, 5, 5), (1, 8, 40)], trips
    inner, outer = result["loops"][1], result["loops"][0]
    assert inner["launches_per_trip"] >= 1 and outer["launches_per_trip"] >= 1 + 8 * inner["launches_per_trip"]
    assert result["launches"] >= 5 * outer["launches_per_trip"]
