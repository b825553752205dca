"""`jaxrl-rollout train`'s options as the algorithms define them, written out (`cli.option_table()`).

`train --help` is printed from `TABLE`, so that it needs neither jax nor gymnax (about 2 s of imports on
2 CPU cores against 0.1 s); every other use of the options reads the algorithms' classes themselves.
tests/test_startup.py checks that `TABLE` equals `cli.option_table()` and that both give the same help. After a
change to a config's or a hyperparameter record's fields, write it again:

    python -m jaxrl_rollout._option_table
"""

# fmt: off
TABLE = {'algorithms': ('ppo', 'a2c', 'dqn', 'pqn', 'sac', 'td3'),
 'config': {'num_envs': {'defaults': {'ppo': 4, 'a2c': 16, 'dqn': 1, 'pqn': 32, 'sac': 1, 'td3': 1},
                         'kind': 'int',
                         'none': False},
            'num_steps': {'defaults': {'ppo': 128, 'a2c': 5, 'pqn': 64}, 'kind': 'int', 'none': False},
            'update_epochs': {'defaults': {'ppo': 4, 'pqn': 4}, 'kind': 'int', 'none': False},
            'num_minibatches': {'defaults': {'ppo': 4, 'pqn': 16}, 'kind': 'int', 'none': False},
            'network': {'defaults': {'ppo': 'auto',
                                     'a2c': 'auto',
                                     'dqn': 'auto',
                                     'pqn': 'auto',
                                     'sac': 'auto',
                                     'td3': 'auto'},
                        'kind': 'str',
                        'none': False},
            'hidden_sizes': {'defaults': {'ppo': (64, 64),
                                          'a2c': (64, 64),
                                          'dqn': (120, 84),
                                          'pqn': (256, 256),
                                          'sac': (256, 256),
                                          'td3': (256, 256)},
                             'kind': 'tuple',
                             'none': False},
            'activation': {'defaults': {'ppo': 'tanh', 'a2c': 'tanh', 'pqn': 'relu'}, 'kind': 'str', 'none': False},
            'bootstrap_on_truncation': {'defaults': {'ppo': True, 'a2c': True, 'pqn': True},
                                        'kind': 'bool',
                                        'none': False},
            'anneal_lr': {'defaults': {'ppo': True, 'a2c': False, 'pqn': True}, 'kind': 'bool', 'none': False},
            'normalize_advantages': {'defaults': {'ppo': True}, 'kind': 'bool', 'none': False},
            'clip_value_loss': {'defaults': {'ppo': True}, 'kind': 'bool', 'none': False},
            'normalize_observations': {'defaults': {'ppo': False}, 'kind': 'bool', 'none': False},
            'normalize_rewards': {'defaults': {'ppo': False}, 'kind': 'bool', 'none': False},
            'obs_clip': {'defaults': {'ppo': 10.0}, 'kind': 'float', 'none': True},
            'reward_clip': {'defaults': {'ppo': 10.0}, 'kind': 'float', 'none': True},
            'rms_alpha': {'defaults': {'a2c': 0.99}, 'kind': 'float', 'none': False},
            'rms_eps': {'defaults': {'a2c': 1e-05}, 'kind': 'float', 'none': False},
            'buffer_size': {'defaults': {'dqn': 10000, 'sac': 1000000, 'td3': 1000000},
                            'kind': 'int',
                            'none': False},
            'batch_size': {'defaults': {'dqn': 128, 'sac': 256, 'td3': 256}, 'kind': 'int', 'none': False},
            'learning_starts': {'defaults': {'dqn': 10000, 'sac': 5000, 'td3': 25000},
                                'kind': 'int',
                                'none': False},
            'train_frequency': {'defaults': {'dqn': 10}, 'kind': 'int', 'none': False},
            'target_network_frequency': {'defaults': {'dqn': 500, 'sac': 1}, 'kind': 'int', 'none': False},
            'log_interval': {'defaults': {'dqn': 1000, 'sac': 1000, 'td3': 1000}, 'kind': 'int', 'none': False},
            'adam_eps': {'defaults': {'dqn': 1e-08, 'sac': 1e-08, 'td3': 1e-08}, 'kind': 'float', 'none': False},
            'bootstrap': {'defaults': {'dqn': 'time_limits', 'sac': 'time_limits', 'td3': 'time_limits'},
                          'kind': 'str',
                          'none': False},
            'optimize_memory_usage': {'defaults': {'dqn': False, 'sac': False, 'td3': False},
                                      'kind': 'bool',
                                      'none': False},
            'frame_stack_axis': {'defaults': {'dqn': None, 'sac': None, 'td3': None}, 'kind': 'int', 'none': True},
            'layer_norm': {'defaults': {'pqn': True}, 'kind': 'bool', 'none': False},
            'optimizer': {'defaults': {'pqn': 'radam'}, 'kind': 'str', 'none': False},
            'policy_frequency': {'defaults': {'sac': 2, 'td3': 2}, 'kind': 'int', 'none': False},
            'autotune': {'defaults': {'sac': True}, 'kind': 'bool', 'none': False},
            'target_entropy': {'defaults': {'sac': None}, 'kind': 'float', 'none': True},
            'temperature_loss': {'defaults': {'sac': 'cleanrl'}, 'kind': 'str', 'none': False}},
 'hparams': {'lr': {'ppo': 0.00025, 'a2c': 0.0007, 'dqn': 0.00025, 'pqn': 0.0001, 'td3': 0.0003},
             'gamma': {'ppo': 0.99, 'a2c': 0.99, 'dqn': 0.99, 'pqn': 0.99, 'sac': 0.99, 'td3': 0.99},
             'gae_lambda': {'ppo': 0.95},
             'clip_eps': {'ppo': 0.2},
             'ent_coef': {'ppo': 0.01, 'a2c': 0.01},
             'vf_coef': {'ppo': 0.5, 'a2c': 0.5},
             'max_grad_norm': {'ppo': 0.5, 'a2c': 0.5, 'pqn': 10.0},
             'tau': {'dqn': 1.0, 'sac': 0.005, 'td3': 0.005},
             'start_e': {'dqn': 1.0},
             'end_e': {'dqn': 0.05},
             'exploration_fraction': {'dqn': 0.5},
             'q_lambda': {'pqn': 0.95},
             'reward_scale': {'pqn': 0.1},
             'epsilon_start': {'pqn': 1.0},
             'epsilon_finish': {'pqn': 0.2},
             'epsilon_decay': {'pqn': 0.2},
             'policy_lr': {'sac': 0.0003},
             'q_lr': {'sac': 0.001},
             'alpha': {'sac': 0.2},
             'policy_noise': {'td3': 0.2},
             'exploration_noise': {'td3': 0.1},
             'noise_clip': {'td3': 0.5}},
 'no_limit': ('max_grad_norm', 'noise_clip')}
# fmt: on


def _write() -> None:
    import pathlib
    import pprint

    from jaxrl_rollout import cli

    path = pathlib.Path(__file__)
    text = path.read_text()
    head, rest = text.split("# fmt: off\n", 1)
    _, tail = rest.split("# fmt: on\n", 1)
    table = pprint.pformat(cli.option_table(), width=116, sort_dicts=False)
    path.write_text(f"{head}# fmt: off\nTABLE = {table}\n# fmt: on\n{tail}")


if __name__ == "__main__":
    _write()
