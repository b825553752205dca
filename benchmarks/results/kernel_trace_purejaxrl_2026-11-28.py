# The script as run (session 23): benchmarks.kernel_trace on PureJaxRL's make_train, in the PureJaxRL venv:
#   JAX_PLATFORMS=cpu /tmp/pjr_venv/bin/python benchmarks/results/kernel_trace_purejaxrl_2026-11-28.py --seeds 8 --updates 40
# (PUREJAXRL_DIR: the anchor's folder, default ../shared/anchors/purejaxrl beside the repository)
import collections, os, sys
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.environ.get("PUREJAXRL_DIR", os.path.join(os.path.dirname(ROOT), "shared", "anchors", "purejaxrl")))
from benchmarks import kernel_trace
from ppo import make_train as pjr_make_train

def make_train(algo, updates):
    config = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 512 * updates, "UPDATE_EPOCHS": 4,
              "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
              "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True,
              "DEBUG": False}
    roles = collections.defaultdict(list)
    for count, role in ((128, "rollout step"), (16, "gradient step"), (4, "epoch"), (1, "update")):
        roles[count].append(role)
    return pjr_make_train(config), roles
kernel_trace.make_train = make_train
kernel_trace.main(sys.argv[1:])
