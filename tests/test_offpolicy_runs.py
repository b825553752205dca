"""The off-policy learners (DQN, PQN, SAC, TD3) through the runner and the command line.

A run of each: an interrupted and resumed run (its replay buffer in the
checkpoint) ends bit-identical to an uninterrupted one; a grid point's seed
equals a single `train` call; the command line trains with relative folders,
evaluates and resumes; bad hyperparameters and envs exit 2 in one line.
Tiny networks and a few hundred steps keep it to one compile per algorithm
and layout.
"""

import json
import re

import jax
import numpy as np
import pytest

from jaxrl_rollout import algorithms, checkpoint, cli, runner
from jaxrl_rollout.algorithms import dqn, pqn, sac, td3
from tests.trees import host_leaves

# 12, 8, 6 and 6 updates; chunks of 3 (2 for SAC and TD3).
CONFIGS = {
    "dqn": dqn.DQNConfig(total_timesteps=1_200, buffer_size=500, batch_size=16, learning_starts=200, train_frequency=4,
                         target_network_frequency=40, hidden_sizes=(16, 16), log_interval=100),
    "pqn": pqn.PQNConfig(num_envs=4, num_steps=16, total_timesteps=512, update_epochs=1, num_minibatches=2,
                         hidden_sizes=(16, 16)),
    "sac": sac.SACConfig(total_timesteps=600, buffer_size=600, batch_size=16, learning_starts=100,
                         hidden_sizes=(16, 16), log_interval=100),
    "td3": td3.TD3Config(total_timesteps=600, buffer_size=600, batch_size=16, learning_starts=100,
                         hidden_sizes=(16, 16), log_interval=100),
}
CHUNK = {"dqn": 3, "pqn": 3, "sac": 2, "td3": 2}


def _spec(algo, grid=None, seeds=2):
    hparams_cls = algorithms.get(algo).hparams
    return runner.RunSpec(algo, CONFIGS[algo], tuple(grid or (hparams_cls(),)), seeds, chunk_updates=CHUNK[algo])


def _start(spec, folder):
    """A run folder as the command line writes it: config.json first."""
    (folder / "config.json").write_text(json.dumps(spec.to_json()))
    return folder


@pytest.fixture(scope="module")
def full_runs():
    return {algo: runner.train(_spec(algo), progress=None) for algo in CONFIGS}


@pytest.mark.parametrize("algo", sorted(CONFIGS))
def test_interrupted_and_resumed_run_ends_bit_identical(algo, full_runs, tmp_path, monkeypatch):
    # every leaf with an axis of size 1 (the buffers' [runs, 1 env, ...], one run's keys) is saved without those
    # axes, as a CPU run's leaves of 1 MiB or more are (`checkpoint._without_unit_axes`), and read back into its shape
    monkeypatch.setattr(checkpoint, "UNIT_AXES_MIN_BYTES", 0)
    spec, full = _spec(algo), full_runs[algo]
    assert full.complete and full.updates_done == spec.config.num_updates
    part = runner.train(spec, _start(spec, tmp_path), stop_after_chunks=2, progress=None)
    assert not part.complete and part.chunks_done == 2
    _, saved, _, _ = runner.load_run(tmp_path)
    if algo != "pqn":  # the replay buffer is in the checkpoint, as far as it was filled
        assert checkpoint.read_manifest(tmp_path)["stored_shapes"]  # (PQN's 4 envs and 2 runs leave no unit axis)
        stored = np.asarray(saved.buffer.experience.obs)
        assert stored.shape[0] == 2 and spec.config.buffer_size in stored.shape and np.abs(stored).sum() > 0
        np.testing.assert_array_equal(np.asarray(saved.buffer.current_index), np.asarray(part.state.buffer.current_index))
    # what acts with the policies (`evaluate`, `load_policy`) reads their leaves alone: no replay buffer
    _, acting, _, _ = runner._load_run_policies(tmp_path)
    policies = jax.vmap(runner.make_algorithm(spec).policy_params)
    for a, b in zip(host_leaves(policies(saved)), host_leaves(policies(acting)), strict=True):
        np.testing.assert_array_equal(a, b)
    read = [x for x in jax.tree.leaves(acting, is_leaf=lambda x: x is None) if x is not None]
    assert 0 < len(read) < len(jax.tree.leaves(saved))
    if algo != "pqn":
        assert all(x is None for x in jax.tree.leaves(acting.buffer, is_leaf=lambda x: x is None))
    resumed = runner.train(spec, tmp_path, resume=True, progress=None)
    assert resumed.complete and resumed.updates_run == spec.config.num_updates - part.updates_done
    for a, b in zip(host_leaves(full.state), host_leaves(resumed.state)):
        np.testing.assert_array_equal(a, b)
    assert set(full.metrics) == set(resumed.metrics)
    for name in full.metrics:
        np.testing.assert_array_equal(full.metrics[name], resumed.metrics[name], err_msg=name)


@pytest.mark.parametrize("algo", sorted(CONFIGS))
def test_a_run_of_the_sweep_equals_a_single_train_call(algo, full_runs):
    spec, full = _spec(algo), full_runs[algo]
    single = jax.jit(algorithms.get(algo).make(spec.config).train)
    state, metrics = single(spec.run_keys()[1], algorithms.get(algo).hparams())
    for a, b in zip(host_leaves(jax.tree.map(lambda x: x[1], full.state)), host_leaves(state)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(full.metrics["num_episodes"][1], np.asarray(metrics.num_episodes))
    # The same program with learning rates that diverge: the `nonfinite` flag is set, and at the end the
    # params themselves are not finite (bit 4; `runner.Diverged` reads the flag).
    defaults = algorithms.get(algo).hparams()
    huge = defaults._replace(**{f: 1e30 for f in ("lr", "policy_lr", "q_lr") if f in defaults._fields})
    _, diverged = single(spec.run_keys()[1], huge)
    flags = np.asarray(diverged.nonfinite)
    assert not np.asarray(metrics.nonfinite).any() and flags.any(), flags
    assert flags[-1] & 4, flags


def test_log_interval_groups_metrics_and_never_changes_training():
    fine = dqn.DQNConfig(**{**CONFIGS["dqn"].__dict__, "log_interval": 4})
    coarse = CONFIGS["dqn"]
    assert (fine.num_updates, coarse.num_updates) == (300, 12)
    assert coarse.steps_per_update == 100
    key = jax.random.key(3)
    s_fine, m_fine = jax.jit(dqn.make_train(fine))(key)
    s_coarse, m_coarse = jax.jit(dqn.make_train(coarse))(key)
    for a, b in zip(host_leaves(s_fine), host_leaves(s_coarse)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.asarray(m_coarse.env_steps), 100 * np.arange(1, 13))
    n_fine = np.asarray(m_fine.num_episodes).reshape(12, 25)
    np.testing.assert_array_equal(np.asarray(m_coarse.num_episodes), n_fine.sum(1))
    ret_fine = np.asarray(m_fine.episode_return).reshape(12, 25)
    weighted = np.where(n_fine > 0, ret_fine * n_fine, 0).sum(1) / np.maximum(n_fine.sum(1), 1)
    np.testing.assert_allclose(np.asarray(m_coarse.episode_return), np.where(n_fine.sum(1) > 0, weighted, np.nan),
                               rtol=1e-6)
    loss_fine = np.asarray(m_fine.loss).reshape(12, 25)
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        np.testing.assert_allclose(np.asarray(m_coarse.loss), np.nanmean(loss_fine, axis=1), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(m_coarse.trained), np.asarray(m_fine.trained).reshape(12, 25).any(1))


def test_the_progress_line_gives_no_time_left_before_learning_starts():
    """A chunk with any update before learning_starts ran faster than the rest will: no time left from its pace."""
    import dataclasses
    import io

    # chunks of 3 updates of 100 iterations: the first is warm-up, the second's first update too (g <= 400)
    config = dataclasses.replace(CONFIGS["dqn"], learning_starts=400)
    pipe = io.StringIO()
    runner.train(runner.RunSpec("dqn", config, (dqn.DQNHParams(),), 1, chunk_updates=3), progress=pipe)
    lines = [line for line in pipe.getvalue().splitlines() if "steps/s" in line]
    assert len(lines) == 4 and " left" not in lines[0] + lines[1] and " left  return" in lines[2], lines


def test_config_mistakes_get_their_own_message():
    # hidden_sizes=64 was "'int' object is not iterable"; an array NumPy's "truth value ... is ambiguous"
    for cls in (dqn.DQNConfig, pqn.PQNConfig, sac.SACConfig, td3.TD3Config):
        with pytest.raises(ValueError, match=r"^hidden_sizes must be a non-empty tuple of positive ints, such as "
                                             r"\(64, 64\), got 64"):
            cls(hidden_sizes=64)
        assert cls(hidden_sizes=np.array([32, 16])).hidden_sizes == (32, 16)
    # a run too short for one update advised a lower log_interval where an update is already one learner step
    with pytest.raises(ValueError, match=r"gives no update: .* = 2000 env steps \(an update is already one learner "
                                         r"step; raise total_timesteps, or lower num_envs or policy_frequency\)"):
        sac.SACConfig(total_timesteps=1000, policy_frequency=2000, log_interval=250)
    with pytest.raises(ValueError, match=r"gives no update: .* \(lower log_interval for a shorter run\)"):
        td3.TD3Config(total_timesteps=10, log_interval=100)
    # a bfloat16 learning rate passed the record's check, then the optimiser called it "not a real scalar"
    alg = dqn.make_dqn(dqn.DQNConfig(total_timesteps=2000, learning_starts=500, buffer_size=1000))
    alg.init(jax.random.key(0), dqn.DQNHParams(lr=jax.numpy.asarray(1e-3, jax.numpy.bfloat16)))
    # a record for jax.jit, checked first (traced, its values are not read)
    with pytest.raises(ValueError, match=r"^gamma must be in \[0, 1\], got 1.5"):
        algorithms.check_hparams(dqn.DQNHParams(gamma=1.5))
    assert algorithms.check_hparams(dqn.DQNHParams()) == dqn.DQNHParams()


def test_every_learner_checks_its_own_hyperparameter_ranges():
    with pytest.raises(ValueError, match="tau must be in \\(0, 1\\]"):
        runner.RunSpec("dqn", CONFIGS["dqn"], (dqn.DQNHParams(tau=0.0),), 1)
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        algorithms.stack_hparams([sac.SACHParams(), sac.SACHParams(alpha=-1.0)])
    with pytest.raises(ValueError, match="noise_clip"):
        algorithms.stack_hparams([td3.TD3HParams(noise_clip=-0.1)])
    # inf passed every open-ended range (an inf temperature or rate gave an all-NaN run); where it means no
    # limit (a clip) it is taken
    with pytest.raises(ValueError, match=r"^alpha must be >= 0 and finite, got inf"):
        algorithms.stack_hparams([sac.SACHParams(alpha=float("inf"))])
    algorithms.stack_hparams([td3.TD3HParams(noise_clip=float("inf"))])
    assert algorithms.hparam_ranges("pqn") is pqn.HPARAM_RANGES
    assert algorithms.hparam_ranges(sac.SACHParams()) is sac.HPARAM_RANGES
    assert set(algorithms.NAMES) == {"ppo", "a2c", "dqn", "pqn", "sac", "td3"}


def _argv(algo):
    c = CONFIGS[algo]
    sizes = ["--hidden-sizes", "16,16"]
    if algo == "pqn":
        return ["--algo", "pqn", "--num-envs", "4", "--num-steps", "16", "--total-steps", "512", "--update-epochs", "1",
                "--num-minibatches", "2", *sizes]
    argv = ["--algo", algo, "--total-steps", str(c.total_timesteps), "--buffer-size", str(c.buffer_size),
            "--batch-size", "16", "--learning-starts", str(c.learning_starts), "--log-interval", "100", *sizes]
    if algo == "dqn":
        argv += ["--train-frequency", "4", "--target-network-frequency", "40"]
    return argv


def test_cli_trains_with_relative_folders_resumes_and_evaluates(tmp_path, monkeypatch, capsys):
    """SAC from the command line as a user types it: its own default env, a relative --out, a stop, --resume, evaluate."""
    monkeypatch.chdir(tmp_path)
    argv = ["train", *_argv("sac"), "--seeds", "2", "--chunk-updates", "2", "--num-eval", "2", "--out", "runs/sac"]
    assert cli.main([*argv, "--stop-after-chunks", "1"]) == 0
    out = capsys.readouterr().out
    assert "SAC on Pendulum-v1, 2 seeds x 600 steps" in out and "continue with: jaxrl-rollout train --resume runs/sac" in out
    assert cli.main(["train", "--resume", "runs/sac", "--num-eval", "2"]) == 0
    captured = capsys.readouterr()
    assert "deterministic evaluation, 2 episodes per run" in captured.out and "resuming after chunk 1" in captured.err
    assert "mean episode return by update (6 updates): " in captured.out  # 600 steps, log_interval 100
    assert "step 600/600 (100.0%)" in captured.err
    folder = tmp_path / "runs" / "sac"
    assert {"config.json", "metrics.csv", "learning_curve.png"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "config.json").read_text())["algo"] == "sac"
    # the command line's spec: the test's config, evaluated once per chunk (the default --eval-every chunk)
    spec = runner.read_spec(folder)
    assert spec == runner.RunSpec("sac", CONFIGS["sac"], (sac.SACHParams(),), 2, chunk_updates=2, eval_every=2)
    rows = (folder / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("grid_point,seed,update,step,metric,value") and ",600,critic_loss," in rows[-8] + "".join(rows)
    assert cli.main(["evaluate", "runs/sac", "--num-episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "SAC on Pendulum-v1, checkpoint final" in out and "deterministic" in out and "stochastic" in out
    assert len([line for line in out.splitlines() if line.startswith("  default")]) == 2


@pytest.mark.parametrize("algo", ["dqn", "pqn", "td3"])
def test_cli_trains_and_evaluates_each_learner(algo, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", *_argv(algo), "--seeds", "2", "--chunk-updates", str(CHUNK[algo]), "--num-eval", "2",
                     "--tensorboard", "false", "--eval-every", "off", "--out", "run"]) == 0  # the runner tests' chunk
    env = "Pendulum-v1" if algo == "td3" else "CartPole-v1"
    out, err = capsys.readouterr()
    assert f"{algo.upper()} on {env}, 2 seeds" in out
    # the replay buffer's size, the state's bulk: buffer_size x (obs and next_obs, float32 action or int32, float32
    # reward, two flags), a few bytes of ring indices aside (CartPole: 4 floats an observation; Pendulum: 3)
    buffer = {"dqn": "; replay buffers 21 kB per run (42 kB in all)\n",
              "td3": "; replay buffers 20.4 kB per run (40.8 kB in all)\n"}
    if algo in buffer:
        assert buffer[algo] in err, err
    else:  # PQN keeps no buffer
        assert "replay" not in err
    assert cli.main(["evaluate", "run", "--num-episodes", "2", "--video", "--runs", "worst,0"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("grid point"))
    if algo in ("dqn", "td3"):  # no stochastic column, as the line before the table says (a column of n/a before)
        assert "policy is deterministic" in out and "no stochastic column" in out and "stochastic" not in header
        assert "n/a" not in out
    else:
        assert "stochastic" in header and "n/a" not in out
    videos = sorted((tmp_path / "run" / "videos").iterdir())
    assert "videos of one deterministic episode per run in run/videos" in out
    # named by the checkpoint's update and evaluate's --seed (0), so another checkpoint's or seed's are told apart
    assert 1 <= len(videos) <= 2 and all(re.match(r"update\d+_evalseed0_seed\d_return", v.name) for v in videos), videos
    import imageio.v3 as iio

    frames = iio.imread(videos[0])
    assert frames.ndim == 4 and frames.shape[0] > 1 and frames.shape[-1] == 3
    assert np.abs(frames[-1].astype(int) - frames[0].astype(int)).max() > 0  # the pictures change over time
    if algo == "dqn":  # train longer: epsilon's decay is a fraction of the whole run, and the command says so
        # a total that adds no update to the complete run changes nothing (it said "extending" and moved epsilon
        # from an update 13 that never came)
        assert cli.main(["train", "--resume", "run", "--total-steps", "1250", "--num-eval", "1"]) == 0
        out, err = capsys.readouterr()
        assert ("--total-steps 1250 gives the run in run the same 12 updates (1,200 steps per run) as its saved "
                "1,200: nothing changes") in out and "epsilon" not in out and "the run is complete (12 updates)" in err
        assert cli.main(["train", "--resume", "run", "--total-steps", "1800", "--stop-after-chunks", "1"]) == 0
        out = capsys.readouterr().out
        assert "extending the run in run from 1,200 to 1,800 steps per run\n" in out
        assert "epsilon: from update 13 on, the exploration rate follows the new total's schedule" in out
        # with updates left (15 of 18 done), a total that moves the iterations but not the updates says just that
        assert cli.main(["train", "--resume", "run", "--total-steps", "1850", "--stop-after-chunks", "1"]) == 0
        out = capsys.readouterr().out
        assert ("--total-steps 1,850 keeps the run in run at its 18 updates (1,800 steps per run) and moves what "
                "follows the total (saved: 1,800)") in out and "extending" not in out, out
        assert "epsilon: from update 16 on" in out


@pytest.mark.parametrize("argv, words", [
    (["--algo", "sac", "--tau", "0"], "--tau 0: tau must be in (0, 1]"),
    (["--algo", "sac", "--lr", "1e-3"], "--lr is not a hyperparameter of SAC"),
    (["--algo", "dqn", "--clip-eps", "0.1"], "--clip-eps is not a hyperparameter of DQN"),
    (["--algo", "td3", "--num-steps", "8"], "--num-steps is not an option of TD3"),
    # the four learners name the action space they got in one form (`_common.space_text`), and the learners of it
    (["--algo", "dqn", "--env", "Pendulum-v1"], "--env Pendulum-v1: DQN needs Discrete actions, got Box(1 float32); "
                                                "SAC, TD3, PPO and A2C learn actions in a 1-D Box of floats."),
    (["--algo", "sac", "--env", "CartPole-v1"], "--env CartPole-v1: SAC needs continuous actions, a 1-D Box, got "
                                                "Discrete(2); DQN, PQN, PPO and A2C learn Discrete actions."),
    (["--algo", "td3", "--env", "CartPole-v1"], "--env CartPole-v1: TD3 needs continuous actions, a 1-D Box, got "
                                                "Discrete(2); DQN, PQN, PPO and A2C learn Discrete actions."),
    (["--algo", "pqn", "--env", "gymnasium/Pendulum-v1"],
     "--env gymnasium/Pendulum-v1: PQN needs Discrete actions, got Box(1 float32); SAC, TD3, PPO and A2C learn "
     "actions in a 1-D Box of floats."),
    # a two-player game: neither learner has self-play, and neither points to the other
    (["--algo", "pqn", "--env", "pgx/tic_tac_toe"],
     "--env pgx/tic_tac_toe: a two-player game trains by self-play, which PQN does not do; train it with ppo or a2c."),
    (["--algo", "dqn", "--env", "pgx/tic_tac_toe"],
     "--env pgx/tic_tac_toe: a two-player game trains by self-play, which DQN does not do; train it with ppo or a2c."),
    # a pytree observation that the built-in networks cannot take: no Python-only advice leads the line
    (["--algo", "dqn", "--env", "jumanji/Snake-v1"],
     "error: --env jumanji/Snake-v1: DQN's QNetwork takes a single array observation (a Box or Discrete space), "
     "got a pytree"),
    (["--algo", "dqn", "--log-interval", "0"], "--log-interval 0: log_interval must be a positive int"),
    (["--algo", "sac", "--total-steps", "1", "--log-interval", "1"], "gives no update"),
    (["--algo", "sac", "--buffer-size", "100"], "--buffer-size 100: batch_size=256 is more than buffer_size=100"),
    # past int32: flashbax's positions overflowed inside the first add (a traceback after the header)
    (["--algo", "sac", "--buffer-size", "3e9"], "--buffer-size 3000000000: buffer_size=3000000000 is more than "
                                                "2,147,483,647 (2**31 - 1), the most transitions the int32 positions"),
    (["--algo", "td3", "--hidden-sizes", "3000000000"], "--hidden-sizes 3000000000: hidden_sizes must be at most "
                                                        "2,147,483,647 (2**31 - 1) units a layer"),
    (["--algo", "dqn", "--num-envs", "8", "--buffer-size", "4", "--batch-size", "4"],
     "num_envs=8 is more than buffer_size=4"),
    (["--algo", "sac", "--total-steps", "4000"], "--total-steps 4000: learning_starts=5000 leaves no gradient step"),
    # options the run would not read: a sweep over alpha with the learned temperature trains one run per label
    (["--algo", "sac", "--alpha", "0.05,0.2"], "--alpha 0.05,0.2: SAC learns its temperature (autotune, the "
                                                "default), so alpha is not read; add --autotune false"),
    (["--algo", "sac", "--autotune", "false", "--temperature-loss", "sb3"],  # SACConfig's own check, led by both
     "--autotune false --temperature-loss sb3: temperature_loss='sb3' is read only when the temperature is learned"),
    (["--algo", "sac", "--autotune", "false", "--temperature-loss", "cleanrl"],  # the default, typed: not read
     "--temperature-loss cleanrl: read only when SAC learns its temperature, which --autotune false turns off."),
    (["--algo", "sac", "--autotune", "false", "--target-entropy", "-2"],  # SACConfig's own check, led by both
     "--autotune false --target-entropy -2.0: target_entropy=-2.0 is read only when the temperature is learned"),
    (["--algo", "dqn", "--target-network-frequency", "600000"],
     "--target-network-frequency 600000: target_network_frequency=600000 leaves the target network as initialised"),
    # a decay length with a constant epsilon: a sweep over it trained identical runs under different labels
    (["--algo", "dqn", "--start-e", "0.05", "--end-e", "0.05", "--exploration-fraction", "0.1,0.5"],
     "--exploration-fraction 0.1,0.5: epsilon stays at 0.05 (start_e = end_e), so the decay's length is not read"),
    (["--algo", "pqn", "--epsilon-start", "0.2", "--epsilon-decay", "0.3"],
     "--epsilon-decay 0.3: epsilon stays at 0.2 (epsilon_start = epsilon_finish)"),
    (["--algo", "td3", "--total-steps", "30000", "--policy-frequency", "100000"],
     "--total-steps 30000 --policy-frequency 100000: policy_frequency=100000 leaves the actor as initialised"),
])
def test_bad_off_policy_options_exit_2_in_one_line(argv, words, tmp_path, capsys):
    assert cli.main(["train", *argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_runs_without_video_is_a_clear_error(full_runs, tmp_path, capsys):
    spec = _spec("dqn")
    runner.train(spec, _start(spec, tmp_path), stop_after_chunks=1, progress=None)
    assert cli.main(["evaluate", str(tmp_path), "--runs", "best"]) == 2
    captured = capsys.readouterr()
    assert "--runs selects the runs of --video; add --video." in captured.err
    assert "evaluate" not in captured.out  # refused before the checkpoint is read or any run evaluated


def test_checkpoint_of_an_off_policy_run_is_refused_by_another_algorithm(full_runs, tmp_path):
    runner.train(_spec("dqn"), _start(_spec("dqn"), tmp_path), stop_after_chunks=1, progress=None)
    manifest = checkpoint.read_manifest(tmp_path)
    assert manifest["meta"]["spec"]["algo"] == "dqn"
    config = json.loads((tmp_path / "config.json").read_text())
    config["grid"][0]["tau"] = 0.5
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="grid\\[0\\].tau"):
        runner.train(_spec("dqn", grid=(dqn.DQNHParams(tau=0.5),)), tmp_path, resume=True, progress=None)


@pytest.mark.parametrize("algo", ["dqn", "sac", "td3"])
def test_runner_keeps_the_iteration_conds_as_branches(algo):
    """Under the runner's vmap over runs, the learners' `lax.cond`s on the iteration counter (learning_starts,
    TD3's delayed actor step) stay conditionals: a plain vmap makes them selects that compute both branches."""
    spec = _spec(algo)
    made = algorithms.get(algo).make(spec.config)
    keys, hparams = spec.run_keys(), spec.run_hparams()
    state = jax.eval_shape(jax.vmap(made.init), keys, hparams)
    assert type(state).LOCKSTEP == ("iteration",)

    def chunk(state, hparams):
        return jax.lax.scan(lambda s, _: made.update(s, hparams), state, None, length=2)

    def branches(fn):
        return jax.jit(fn).lower(state, hparams).as_text().count("stablehlo.case")

    assert branches(jax.vmap(chunk)) == 0
    assert branches(runner._in_lockstep(chunk, in_axes=(0, 0))) >= (2 if algo == "td3" else 1)
    out = jax.eval_shape(runner._in_lockstep(chunk, in_axes=(0, 0)), state, hparams)
    assert out[0].iteration.shape == (spec.num_runs,)  # the runs axis is kept on the way out


@pytest.mark.parametrize("algo", ["dqn", "sac", "td3"])
def test_the_iteration_is_compiled_once(algo):
    """`init` steps no env and every learner step's iterations share one traced body (period > 1 included), so a
    train program holds one copy of the env step (the iteration's copy in `init` was 23% of DQN's program).
    gymnax's `Environment.step` is a `jax.jit` named "step": its calls in the train's jaxpr are the copies."""
    from tests.toy_envs import BoxCountingEnv, CountingEnv

    config = {"dqn": dqn.DQNConfig(total_timesteps=400, buffer_size=100, batch_size=8, learning_starts=50,
                                   train_frequency=4, target_network_frequency=100, hidden_sizes=(8,),
                                   log_interval=100),
              "sac": sac.SACConfig(total_timesteps=400, buffer_size=100, batch_size=8, learning_starts=50,
                                   hidden_sizes=(8,), log_interval=100),  # policy_frequency 2
              "td3": td3.TD3Config(total_timesteps=400, buffer_size=100, batch_size=8, learning_starts=50,
                                   hidden_sizes=(8,), log_interval=100)}[algo]
    assert config.num_updates * config.steps_per_update == 400  # every env step of total_timesteps is taken
    env = CountingEnv() if algo == "dqn" else BoxCountingEnv()
    made = algorithms.get(algo).make(config, env=env)
    jaxpr = str(jax.make_jaxpr(made.train)(jax.random.key(0)))
    assert len(re.findall(r"name=step\b", jaxpr)) == 1
    assert "name=step" not in str(jax.make_jaxpr(made.init)(jax.random.key(0)))
