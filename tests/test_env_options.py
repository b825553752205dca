"""`env_options`: an env's make options in every algorithm's config, and `--env-option NAME=VALUE` on the command
line, saved with the run (config.json), so that a resume, `evaluate` and `--config` build the same env.

Before them an env without a time limit (jumanji's Game2048, pgx's 2048) could not train from the command line,
and an untrained Atari policy's evaluations ran to the 27,000-step limit: the options could only be given from
Python, with the env itself.
"""

import json

import jax
import numpy as np
import pytest

from jaxrl_rollout import algorithms, cli, runner
from jaxrl_rollout.algorithms import _common, ppo, sac
from jaxrl_rollout.collect import episode_limit

# Each algorithm with an env it can train, from a suite whose make takes a time limit.
_ENVS = {"ppo": "gymnasium/CartPole-v1", "a2c": "gymnasium/CartPole-v1", "dqn": "gymnasium/CartPole-v1",
         "pqn": "gymnasium/CartPole-v1", "sac": "gymnasium/Pendulum-v1", "td3": "gymnasium/Pendulum-v1"}


def test_every_algorithm_builds_its_env_with_the_configs_options():
    assert set(_ENVS) == set(algorithms.NAMES)
    for algo, env_id in _ENVS.items():
        config_cls = algorithms.get(algo)[0]
        default = algorithms.get(algo).make(config_cls(env_id=env_id))
        built = algorithms.get(algo).make(config_cls(env_id=env_id, env_options={"max_episode_steps": 7}))
        assert episode_limit(default.env, default.env_params, None) > 7, algo
        assert episode_limit(built.env, built.env_params, None) == 7, algo


def test_a_config_keeps_its_options_as_sorted_pairs():
    a = ppo.PPOConfig(env_id="brax/ant", env_options={"episode_length": 50, "backend": "spring"})
    b = ppo.PPOConfig(env_id="brax/ant", env_options=[("backend", "spring"), ("episode_length", np.int64(50))])
    assert a.env_options == (("backend", "spring"), ("episode_length", 50)) and type(b.env_options[1][1]) is int
    assert a == b and hash(a) == hash(b)  # one static config under jit
    assert ppo.PPOConfig().env_options == ()


@pytest.mark.parametrize("options, message", [
    ({"max_episode_steps": [1, 2]}, r"env_options: max_episode_steps=\[1, 2\] is a list; an option's value must be "
                                    r"a bool, int, float, str or None"),
    ({"ruleset": object()}, r"env_options: ruleset=.* is a object; .* make_train\(config, env=envs.make"),
    ([("a", 1), ("a", 2)], r"env_options: a given more than once"),
    ({"not a name": 1}, r"an option's name must be a keyword of the env's make .* got 'not a name'"),
    ("max_episode_steps=5", r"env_options must be a dict of the env's make options"),
])
def test_a_config_refuses_options_it_cannot_keep(options, message):
    with pytest.raises(ValueError, match=message):
        ppo.PPOConfig(env_id="jumanji/Game2048-v1", env_options=options)


@pytest.mark.parametrize("algo", sorted(algorithms.NAMES))
def test_gymnax_envs_take_no_options_at_config_time(algo):
    config_cls = algorithms.get(algo)[0]
    with pytest.raises(ValueError, match=r"env_options \{'max_steps': 5\}: gymnax envs take no options"):
        config_cls(env_options={"max_steps": 5})


def test_options_go_to_config_json_only_when_set_and_come_back():
    plain = runner.RunSpec("ppo", ppo.PPOConfig(), (ppo.PPOHParams(),), 1)
    assert "env_options" not in plain.to_json()["config"]  # a run without them writes config.json as before
    config = ppo.PPOConfig(env_id="jumanji/Game2048-v1", env_options={"max_episode_steps": 200})
    spec = runner.RunSpec("ppo", config, (ppo.PPOHParams(),), 1)
    data = json.loads(json.dumps(spec.to_json()))
    assert data["config"]["env_options"] == {"max_episode_steps": 200}
    assert runner.RunSpec.from_json(data) == spec
    data["config"]["env_options"] = [["max_episode_steps", 200]]
    with pytest.raises(ValueError, match=r"config.env_options must be an object of the env's make options"):
        runner.RunSpec.from_json(data)


def test_a_run_trains_on_the_env_its_options_make():
    """Game2048 has no time limit and cannot end in 5 moves: every episode of the run ends at the option's 5."""
    config = ppo.PPOConfig(env_id="jumanji/Game2048-v1", env_options={"max_episode_steps": 5}, num_envs=2,
                           num_steps=16, total_timesteps=64, num_minibatches=2, update_epochs=1)
    _, metrics = jax.jit(ppo.make_train(config))(jax.random.key(0))
    lengths = np.asarray(metrics.episode_length)
    assert np.asarray(metrics.num_episodes).sum() > 0 and np.all(lengths[~np.isnan(lengths)] == 5), lengths


def test_self_play_refuses_the_options_it_sets_and_evaluates_within_max_steps():
    with pytest.raises(ValueError, match=r"env_options agent_seat=1: self-play training of 'pgx/tic_tac_toe' seats "
                                         r"the agent at random .* and sets agent_seat itself"):
        ppo.make_ppo(ppo.PPOConfig(env_id="pgx/tic_tac_toe", env_options={"agent_seat": 1}))
    built = ppo.make_ppo(ppo.PPOConfig(env_id="pgx/tic_tac_toe", env_options={"max_steps": 3}))
    assert episode_limit(built.env, built.env_params, None) == 3
    default = ppo.make_ppo(ppo.PPOConfig(env_id="pgx/tic_tac_toe"))
    assert episode_limit(default.env, default.env_params, None) == _common.SELF_PLAY_EVAL_MAX_MOVES


@pytest.mark.parametrize("text, value", [("max_steps=50", 50), ("x=0.5", 0.5), ("x=True", True), ("x=false", False),
                                         ("x=none", None), ("backend=mjx", "mjx"), ("x=1_000", 1000), ("x=", ""),
                                         ("continuous=no", False), ("x=Yes", True), ("x=on", True),
                                         ("x=OFF", False), ("x=1", 1), ("x=nope", "nope")])
def test_env_option_values_are_read_as_typed(text, value):
    name, parsed = cli._env_option(text)
    assert name == text.partition("=")[0] and parsed == value and type(parsed) is type(value)


_SMALL = ["--seeds", "1", "--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
          "--total-steps", "64", "--eval-every", "off", "--num-eval", "2", "--tensorboard", "false"]


def test_the_command_line_trains_an_env_without_a_time_limit_given_one(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative folders, as a user types them
    assert cli.main(["train", "--env", "jumanji/Game2048-v1", "--out", "runs/none", *_SMALL]) == 2
    assert "give it one: --env-option max_episode_steps=N." in capsys.readouterr().err
    assert not (tmp_path / "runs/none").exists()

    assert cli.main(["train", "--env", "jumanji/Game2048-v1", "--env-option", "max_episode_steps=5", "--out",
                     "runs/g", *_SMALL]) == 0
    out = capsys.readouterr().out
    assert "PPO on jumanji/Game2048-v1 (max_episode_steps=5), 1 seed" in out, out
    saved = json.loads((tmp_path / "runs/g/config.json").read_text())
    assert saved["config"]["env_options"] == {"max_episode_steps": 5}
    assert "deterministic evaluation, 2 episodes: mean return " in out, out  # one run: its figure, no spread

    # evaluate builds the run's env with its options (without them, whole episodes of Game2048 have no bound)
    assert cli.main(["evaluate", "runs/g", "--num-episodes", "2"]) == 0
    assert "(PPO on jumanji/Game2048-v1 (max_episode_steps=5), checkpoint final)" in capsys.readouterr().out

    assert cli.main(["train", "--resume", "runs/g", "--env-option", "max_episode_steps=6"]) == 2
    assert ("--resume runs/g: the run there has a different config: --env-option: max_episode_steps=5 there, "
            "max_episode_steps=6 here.") in capsys.readouterr().err
    assert cli.main(["train", "--resume", "runs/g", "--env-option", "max_episode_steps=5", "--total-steps", "96",
                     "--tensorboard", "false", "--num-eval", "2"]) == 0
    capsys.readouterr()

    # --config takes the options with the env (the header's "from --config" names them), drops them with another
    # env, and with the same env each --env-option replaces the saved value of its own option, the others kept.
    # (The options as `train` reads them, each built into the spec it trains; a whole --config run is test_cli's.)
    for typed, options, kept in (([], (("max_episode_steps", 5),), True),
                                 (["--env", "CartPole-v1"], (), False),
                                 (["--env-option", "board_size=3"], (("board_size", 3), ("max_episode_steps", 5)), True),
                                 (["--env-option", "max_episode_steps=7"], (("max_episode_steps", 7),), False)):
        args = cli.build_parser().parse_args(["train", "--config", "runs/g", *typed])
        given = cli._with_saved_options(args, cli._given(args))
        assert cli._build_spec(given).config.env_options == options, typed
        shown = " ".join(cli._typed(name, value) for name, value in args.from_config.items())
        assert ("--env-option max_episode_steps=5" in shown) == kept, shown
        assert ("--env jumanji/Game2048-v1" in shown) == ("--env" not in typed), shown


@pytest.mark.parametrize("argv, message", [
    (["--env-option", "max_episode_steps=5"], r"--env-option max_episode_steps=5: CartPole-v1 is a gymnax env, "
                                              r"whose make takes no options"),
    (["--env", "jumanji/Game2048-v1", "--env-option", "foo=1"],
     r"--env jumanji/Game2048-v1 --env-option foo=1: .*foo"),
    (["--env", "jumanji/Game2048-v1", "--env-option", "max_episode_steps=5", "--env-option", "max_episode_steps=6"],
     r"--env-option: max_episode_steps given more than once\."),
    (["--env", "pgx/tic_tac_toe", "--env-option", "agent_seat=1"], r"--env-option agent_seat=1: env_options "
                                                                   r"agent_seat=1: self-play training"),
])
def test_the_command_line_refuses_options_in_one_line(tmp_path, capsys, argv, message):
    import re

    assert cli.main(["train", *argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxrl-rollout: error: ") and err.count("\n") == 1 and re.search(message, err), err
    assert not (tmp_path / "run").exists()



def test_evaluate_takes_options_whose_env_has_the_runs_spaces():
    """`evaluate --env-option` replaces the run's own value of each option given, keeps the others, and refuses
    an env whose observations or actions differ from those the policy was trained on (a Discrete leaf's count
    too: network=auto reads it one hot), options for gymnax, and what self-play sets itself, each naming them."""
    run = runner.RunSpec("ppo", ppo.PPOConfig(env_id="jumanji/Snake-v1", env_options={"time_limit": 4000}),
                         (ppo.PPOHParams(),), 1)
    with pytest.raises(ValueError, match=r"^--env-option num_rows=6: the env these options make has observations "
                                         r"Dict\(.*grid: Box\(6x12x5 float32\).*, where the run's has Dict\(.*"
                                         r"grid: Box\(12x12x5 float32\).*; a policy acts only on the spaces"):
        cli._evaluation_spec(run, (("num_rows", 6),))
    with pytest.raises(ValueError, match=r"^--env-option time_limit=50: .*step_count: Discrete\(50\)\), where "
                                         r"the run's has .*step_count: Discrete\(4000\)"):
        cli._evaluation_spec(run, (("time_limit", 50),))
    with pytest.raises(ValueError, match=r"^--env-option max_steps=5: CartPole-v1 is a gymnax env, whose make takes "
                                         r"no options"):
        cli._evaluation_spec(runner.RunSpec("ppo", ppo.PPOConfig(), (ppo.PPOHParams(),), 1), (("max_steps", 5),))
    game = runner.RunSpec("ppo", ppo.PPOConfig(env_id="pgx/tic_tac_toe"), (ppo.PPOHParams(),), 1)
    with pytest.raises(ValueError, match=r"^--env-option agent_seat=1: env_options agent_seat=1: self-play"):
        cli._evaluation_spec(game, (("agent_seat", 1),))
    spec, algorithm = cli._evaluation_spec(game, (("max_steps", 3),))
    assert spec.config.env_options == (("max_steps", 3),) and spec.grid == game.grid
    assert episode_limit(algorithm.env, algorithm.env_params, None) == 3  # the evaluation's bound, not its 1,000
    boxes = runner.RunSpec("sac", sac.SACConfig(env_id="gymnasium/Pendulum-v1"), (sac.SACHParams(),), 1)
    spec, _ = cli._evaluation_spec(boxes, (("max_episode_steps", 50),))
    assert spec.config.env_options == (("max_episode_steps", 50),)


def test_evaluate_names_its_videos_by_the_options_given():
    """Videos of one checkpoint evaluated under other env options get names of their own (they replaced each other
    when the episode's return was the same); without --env-option the names are as before."""
    import argparse

    def prefix(options, update="07", seed=0):
        return cli._video_prefix(argparse.Namespace(env_option=options, seed=seed), update)

    assert prefix(None) == "update07_evalseed0_"
    assert prefix(None, update=None, seed=3) == "best_evalseed3_"
    assert prefix([("max_episode_steps", 200)]) == "update07_evalseed0_max_episode_steps=200_"
    # as typed, sorted by name; a character a file name should not hold (a path's "/") as "-"
    assert prefix([("x", "a/b c"), ("max_episode_steps", None), ("flag", True)], update=None) == \
        "best_evalseed0_flag=true_max_episode_steps=none_x=a-b-c_"


def test_rollout_of_a_two_player_game_takes_a_seat(capsys):
    """rollout plays a two-player game's random opponent from a random seat, as train evaluates it; a seat given
    with --env-option replaces it (training refuses one: self-play seats the agent itself)."""
    assert cli.main(["rollout", "--env", "pgx/tic_tac_toe", "--env-option", "agent_seat=1", "--num-envs", "2",
                     "--num-steps", "8", "--num-eval", "2"]) == 0
    assert "uniform random policy on pgx/tic_tac_toe (agent_seat=1)" in capsys.readouterr().out


def test_wandb_runs_get_the_options_as_config_json_has_them(tmp_path, monkeypatch):
    import sys
    import types

    from jaxrl_rollout.loggers import WandbLogger

    started = []
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=lambda **kwargs: started.append(kwargs),
                                                                     Settings=lambda **kwargs: None))
    config = ppo.PPOConfig(env_id="jumanji/Game2048-v1", env_options={"max_episode_steps": 5})
    WandbLogger(tmp_path, runner.RunSpec("ppo", config, (ppo.PPOHParams(),), 1), mode="offline")._start()
    ((run,),) = [started]
    assert run["config"]["env_id"] == "jumanji/Game2048-v1" and run["config"]["env_options"] == {"max_episode_steps": 5}
