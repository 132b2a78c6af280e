"""The names of the ``DETHPC_*`` environment variables a job's processes read.

Owns: one constant per variable that dethpc sets in a trial's environment and the
in-job API reads (``dethpc.core`` and ``dethpc.pytorch`` read them; the config layer
names ``DETHPC_TEST_MODE`` in a test experiment's environment), and ``trial_contract``:
the variables every trial's job exports, whatever runs in it (a managed trial,
``dethpc.jobs.render.trial_env``; a search's script, ``dethpc.jobs.script_jobs``; the
``dethpc sbatch`` wrapper exports the same names, given to its template).
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
ENV_BACKEND = "DETHPC_BACKEND"
ENV_SLOTS_PER_TRIAL = "DETHPC_SLOTS_PER_TRIAL"
ENV_SOCKET_IFNAME = "DETHPC_SOCKET_IFNAME"
ENV_HPARAMS = "DETHPC_HPARAMS"
ENV_TARGET_LENGTH = "DETHPC_TARGET_LENGTH"
ENV_TARGET_UNIT = "DETHPC_TARGET_UNIT"

#: the signal on which a trial's processes write the Python stacks of all their threads
#: to their stderr (the trial log): the hang watchdog sends it to every rank before it
#: ends a hung job. URG: ignored by default, so a process without the handler (a user's
#: script, a launcher) is not harmed by it
STACK_DUMP_SIGNAL = "URG"


def trial_contract(*, experiment_id: int, trial_id: int, trial_dir: str, config: str,
                   signal: str, seed: int) -> list[tuple[str, str]]:
    """The variables every trial's job exports, in this order."""
    return [(ENV_EXPERIMENT_ID, str(experiment_id)), (ENV_TRIAL_ID, str(trial_id)),
            (ENV_TRIAL_DIR, trial_dir), (ENV_EXPERIMENT_CONFIG, config),
            (ENV_PREEMPT_SIGNAL, signal), (ENV_TRIAL_SEED, str(seed))]
