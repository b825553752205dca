"""The README's commands and quickstart stay true."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _bash_blocks():
    return re.findall(r"```bash\n(.*?)```", README, flags=re.S)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    commands = [line for block in _bash_blocks() for line in block.splitlines()
                if line.strip() and not line.startswith("#")]
    assert len(commands) == 2, commands
    main_cmd, test_cmd = commands
    assert main_cmd.endswith("python -m jaxrl_rollout")
    assert test_cmd.endswith("python -m pytest -n 2 --dist loadfile")  # pytest-xdist, in the test extra
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_cmd in ci_lines


def test_quickstart_runs():
    code = re.search(r"## Quickstart\n\n```python\n(.*?)```", README, flags=re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README-quickstart", "exec"), namespace)
    assert namespace["traj"].reward.shape == (128, 8)
    assert namespace["result"].returns.shape == (10,)
    assert namespace["trajs"].reward.shape == (16, 128, 8)
    # The estimators section continues from the quickstart's namespace.
    code = re.search(r"## Advantages, batching and the PyTorch recipes\n\n```python\n(.*?)```", README, flags=re.S).group(1)
    exec(compile(code, "README-advantages", "exec"), namespace)
    assert namespace["flat"]["adv"].shape == (128 * 8,)
    assert namespace["idx"].shape == (4, 4, 256)
    assert namespace["cleanrl_adv"].shape == (128, 8)
    code = re.search(r"## Training: PPO and A2C as pure functions\n\n```python\n(.*?)```", README, flags=re.S).group(1)
    exec(compile(code, "README-training", "exec"), namespace)
    assert namespace["per_seed"].episode_return.shape == (4, 40)
    assert namespace["sweep"].episode_return.shape == (2, 40)
