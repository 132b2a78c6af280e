"""The names of the ``DETHPC_*`` environment variables a job's processes read.

Owns: one constant per variable that dethpc sets in a trial's environment and the
in-job API reads (``dethpc.core`` and ``dethpc.pytorch`` read them; the config layer
names ``DETHPC_TEST_MODE`` in a test experiment's environment).
Must not: import anything, or read the environment (``dethpc.core._info`` does).
"""

ENV_TRIAL_DIR = "DETHPC_TRIAL_DIR"
ENV_CHECKPOINT_DIR = "DETHPC_CHECKPOINT_DIR"
ENV_CONTEXT_DIR = "DETHPC_CONTEXT_DIR"
ENV_EXPERIMENT_ID = "DETHPC_EXPERIMENT_ID"
ENV_TRIAL_ID = "DETHPC_TRIAL_ID"
ENV_RUN_ID = "DETHPC_RUN_ID"
ENV_PREEMPT_SIGNAL = "DETHPC_PREEMPT_SIGNAL"
ENV_HPARAMS_FILE = "DETHPC_HPARAMS_FILE"
ENV_EXPERIMENT_CONFIG = "DETHPC_EXPERIMENT_CONFIG"
ENV_TRIAL_SEED = "DETHPC_TRIAL_SEED"
ENV_TEST_MODE = "DETHPC_TEST_MODE"
