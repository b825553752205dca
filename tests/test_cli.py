"""The main job's command line."""

import pytest

from jaxrl_rollout import cli


def test_default_command_rolls_out_cartpole(capsys):
    assert cli.main(["--num-envs", "2", "--num-steps", "100", "--num-eval", "2"]) == 0
    out = capsys.readouterr().out
    assert "CartPole-v1, 2 envs x 100 steps" in out
    assert "completed episodes, mean return" in out
    assert "evaluate: 2 episodes" in out


def test_unknown_env_suggests_close_names(capsys):
    assert cli.main(["rollout", "--env", "CartPol-v1"]) == 2
    assert "Did you mean CartPole-v1" in capsys.readouterr().err


def test_non_positive_sizes_exit_non_zero(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["rollout", "--num-steps", "0"])
    assert info.value.code == 2
    assert "--num-steps: expected a positive integer" in capsys.readouterr().err
