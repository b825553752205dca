"""The notebooks in notebooks/ execute, and are committed with their outputs.

Each notebook runs top to bottom in a fresh kernel with JAXRL_NOTEBOOK_QUICK=1,
which shrinks its training runs so the test only checks that every cell
executes; a cell that raises fails the test. The kernel is this interpreter
(`sys.executable`), so a virtual environment's packages are the ones tested.

Regenerate the committed outputs at the full settings with
`python -m tests.test_notebooks` (from the repository root).
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile

import nbclient
import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(p.name for p in NOTEBOOK_DIR.glob("*.ipynb"))
WITH_PLOTS = ("01_quickstart.ipynb", "02_sweeps.ipynb", "04_bring_your_own_env.ipynb", "05_sac_pendulum.ipynb")
KERNEL_NAME = "jaxrl-rollout-notebooks"


def execute(path: pathlib.Path, quick: bool, cell_timeout: int = 600):
    """Runs the notebook at `path` in a kernel on this interpreter; returns the executed notebook.

    The kernel spec is written to a temporary directory and points at
    `sys.executable`, so whichever `python3` kernel Jupyter would otherwise
    find (another environment's) never runs the notebook. Raises
    `nbclient.exceptions.CellExecutionError` on the first failing cell.
    """
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as tmp:
        spec_dir = pathlib.Path(tmp, "kernels", KERNEL_NAME)
        spec_dir.mkdir(parents=True)
        spec = {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "jaxrl_rollout notebooks",
            "language": "python",
            "env": {"JAXRL_NOTEBOOK_QUICK": "1" if quick else "0"},
        }
        (spec_dir / "kernel.json").write_text(json.dumps(spec))
        km = KernelManager(
            kernel_name=KERNEL_NAME,
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec_dir.parent)]),
        )
        client = nbclient.NotebookClient(
            nb, km=km, timeout=cell_timeout, resources={"metadata": {"path": str(path.parent)}}
        )
        try:
            client.execute()
        finally:
            # nbclient leaves a kernel manager it was handed (`km=`) to its caller: without this the kernel
            # process (JAX and a trained notebook's arrays, 1-2 GB) lived until the test process ended.
            if km.has_kernel:
                km.shutdown_kernel(now=True)
    return nb


def test_notebooks_exist():
    assert NOTEBOOKS == ["01_quickstart.ipynb", "02_sweeps.ipynb", "03_from_pytorch.ipynb", "04_bring_your_own_env.ipynb",
                         "05_sac_pendulum.ipynb"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_committed_with_outputs(name):
    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count is not None for cell in code), f"{name}: run it before committing"
    errors = [out for cell in code for out in cell.outputs if out.output_type == "error"]
    assert not errors, f"{name} was committed with an error output"
    if name in WITH_PLOTS:
        images = [out for cell in code for out in cell.outputs if "image/png" in out.get("data", {})]
        assert images, f"{name} was committed without its plots"
    # every notebook plays an evaluation episode inline (jaxrl_rollout.video.html); the sweep notebook two
    players = [page.count("<video") for cell in code for out in cell.outputs
               for page in [out.get("data", {}).get("text/html", "")] if page]
    assert sum(players) >= (2 if name == "02_sweeps.ipynb" else 1), f"{name} was committed without its video"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_executes(name):
    execute(NOTEBOOK_DIR / name, quick=True, cell_timeout=300)


def _regenerate(names) -> None:
    """Executes the notebooks at full settings and saves them with their outputs."""
    import time

    for name in names or NOTEBOOKS:
        path = NOTEBOOK_DIR / name
        start = time.perf_counter()
        nb = execute(path, quick=False)
        nbformat.write(nb, path)
        print(f"{name}: {time.perf_counter() - start:.0f} s, {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    _regenerate(sys.argv[1:])
