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


def test_every_command_line_example_parses_and_its_train_config_builds():
    """The "Command line" section's example lines: each parses with the real parser, and each new `train`
    gets its run spec built (option names, hyperparameters of that algorithm, ranges, config values) without
    training, so an example cannot name an option or a value the command refuses."""
    import shlex

    from jaxrl_rollout import cli

    block = re.search(r"## Command line\n.*?```text\n(.*?)```", README, flags=re.S).group(1)
    lines = [line.split("#")[0].strip() for line in block.splitlines() if line.startswith("jaxrl-rollout ")]
    assert len(lines) >= 10, lines
    parser = cli.build_parser()
    built = 0
    for line in lines:
        args = parser.parse_args(shlex.split(line)[1:])
        if args.command == "train" and args.resume is None:
            spec = cli._build_spec(cli._given(args))
            assert spec.num_runs >= 1, line
            built += 1
    assert built >= 6, lines


def test_quickstart_runs(tmp_path, monkeypatch):
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
    training: dict = {}  # a section of its own: it runs in a fresh namespace, as pasted into a new notebook
    exec(compile(code, "README-training", "exec"), training)
    assert training["per_seed"].episode_return.shape == (4, 40)
    assert training["sweep"].episode_return.shape == (2, 40)
    # The video section continues from the quickstart too, writing its files into the working directory.
    monkeypatch.chdir(tmp_path)
    code = re.search(r"Continuing the quickstart:\n\n```python\n(.*?)```", README, flags=re.S).group(1)
    exec(compile(code, "README-video", "exec"), namespace)
    assert namespace["frames"].dtype.name == "uint8" and namespace["frames"].ndim == 4
    episode = namespace["video"].video_name("episode0", namespace["rec"].returns[0])
    assert (tmp_path / episode).stat().st_size > 0 and episode.startswith("episode0_return")
    assert len(list((tmp_path / "videos").iterdir())) == 2  # best and worst of the two runs
