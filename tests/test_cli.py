"""The main job's command line."""

import pytest

from jaxrl_rollout import cli


def test_default_command_trains_ppo_on_cartpole(capsys):
    assert cli.main(["--seeds", "2", "--total-steps", "2048", "--num-eval", "2"]) == 0
    out = capsys.readouterr().out
    assert "PPO on CartPole-v1, 2 seeds x 2,048 steps in one vmapped call" in out
    assert "mean episode return by tenth of training" in out
    assert "deterministic evaluation, 2 episodes per seed" in out


def test_rollout_command(capsys):
    assert cli.main(["rollout", "--num-envs", "2", "--num-steps", "100", "--num-eval", "2"]) == 0
    out = capsys.readouterr().out
    assert "CartPole-v1, 2 envs x 100 steps" in out
    assert "completed episodes, mean return" in out


def test_unknown_env_suggests_close_names(capsys):
    assert cli.main(["train", "--env", "CartPol-v1"]) == 2
    assert "Did you mean CartPole-v1" in capsys.readouterr().err
    assert cli.main(["rollout", "--env", "CartPol-v1"]) == 2


def test_bad_values_exit_non_zero(capsys):
    for argv in (["rollout", "--num-steps", "0"], ["train", "--algo", "dqn"], ["train", "--seeds", "-1"]):
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == 2
    assert "--seeds: expected a positive integer" in capsys.readouterr().err
