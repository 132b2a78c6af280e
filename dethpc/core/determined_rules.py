"""Determined 0.38.1's public surface on dethpc: how each name is served (a table).

Owns: ``RULES``, which classifies every entry of
``tests/unit/data/determined/surface-0.38.1.json`` (the inventory
``scripts/determined_inventory.py`` derives from Determined's source) and every ``DET_*``
variable found there: **served** (the same name and parameters, the same behaviour),
**served differently** (the name is there; the note says what happens), **refused** (the
Determined feature and what to do instead: the message the user's code gets where it
uses the name) or, for a variable, **absent** (why it is not set). Also ``rule_for``
(the rule of one inventory entry), ``refusal`` (the message of a refused name, read by
``dethpc.core._refused`` when one fires), ``dethpc_path`` (where a served name lives) and
``doc_table`` (the section of docs/core-api.md generated from the inventory and this
table; ``python scripts/determined_inventory.py --doc`` rewrites it).

A key is Determined's dotted name (``determined.core.TrainContext.report_early_exit``),
``<name>.*`` for the members of a class or module not given their own line, or
``$DET_NAME`` for a variable. A member without a line of its own takes its class's
``.*`` line, else a refusal of its class (or module), searching outwards.
The variables a dethpc job sees are the table in ``dethpc.common.jobenv``: the
variables served here (as they are, or differently) are exactly its ``DET_*`` rows
(``tests/unit/common/test_jobenv.py`` holds the two together); this table classifies
Determined's names, the absent ones included.
Must not: import anything but the standard library and ``dethpc.common`` (it is read
when a refusal fires), or serve a name itself (the code lives with the name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SERVED = "served"
DIFFERENT = "served differently"
REFUSED = "refused"
ABSENT = "absent"


@dataclass(frozen=True)
class Rule:
    """How one name (or group of names) of Determined's is served on dethpc."""

    status: str
    #: DIFFERENT: what happens; REFUSED: what to do instead; ABSENT: why; SERVED: a remark
    note: str = ""
    #: REFUSED: the Determined feature, in words (the error message names it)
    feature: str = ""
    #: dethpc's dotted name when it is not Determined's with ``dethpc`` for
    #: ``determined``; for a ``.*`` line, the replacement of its prefix
    path: str | None = None
    #: False where dethpc's parameters differ on purpose (a constructor users do not
    #: call: the object comes from ``init()``); the note says so
    signature: bool = True


def S(note: str = "", path: str | None = None) -> Rule:  # noqa: N802 - table shorthand
    return Rule(SERVED, note, path=path)


def D(note: str, path: str | None = None, signature: bool = True) -> Rule:  # noqa: N802
    return Rule(DIFFERENT, note, path=path, signature=signature)


def R(feature: str, instead: str) -> Rule:  # noqa: N802
    return Rule(REFUSED, instead, feature=feature)


def A(why: str) -> Rule:  # noqa: N802
    return Rule(ABSENT, why)


_NO_MASTER = "there is no master"
_BUILT = "built by core.init() from the job's environment; its constructor is dethpc's"
_LOGGED = "logged, nothing else: dethpc has no master to send it to"
_APEX = R("NVIDIA apex mixed precision (configure_apex_amp)",
          "use context.experimental.use_amp(), or torch.autocast in train_batch with "
          "context.wrap_scaler(torch.amp.GradScaler())")
_CROSS_SLOT = D("takes dethpc's wrapped reducers (context._wrapped_reducers, as "
                "Determined's) and one list per slot of their per_slot_reduce() results; "
                "context.reduce_metrics(for_training=...) on every rank does the allgather too")
_TRIAL_CLASSES = ("the context class the Trainer builds; trial_controller_class is None: "
                  "no controller class runs a trial here, the Trainer does")
_CUDA_AMP = ("CUDA AMP as Determined's: on a CPU device the scaler and autocast are off and "
             "the numbers are full precision, as Determined's own on CPU")
_SAMPLERS = S("outside the Trainer (which shards, seeds and resumes each DataLoader itself)")
_LEGACY = "the legacy harness"

RULES: dict[str, Rule] = {
    # ------------------------------------------------------------ determined
    "determined.ClusterInfo": D(_BUILT + "; get it from det.get_cluster_info() or "
                                "core_context.info", signature=False),
    "determined.ClusterInfo.*": S(),
    "determined.ClusterInfo.agent_id": D("the node's name: $SLURMD_NODENAME, else the "
                                         "hostname (as Determined's own Slurm launcher)"),
    "determined.ClusterInfo.allocation_id": D("<experiment>.<trial>.<run>, the run counted "
                                              "from 1 (Determined: <experiment>.<uuid>.<run>)"),
    "determined.ClusterInfo.cluster_id": D("the Slurm cluster's name ($SLURM_CLUSTER_NAME, "
                                           "'' outside Slurm)"),
    "determined.ClusterInfo.container_addrs": D("the job's nodes ($SLURM_JOB_NODELIST), "
                                                "first node first"),
    "determined.ClusterInfo.container_rank": D("this node's index ($SLURM_NODEID)"),
    "determined.ClusterInfo.container_slot_counts": D(
        "each node's slots from $SLURM_TASKS_PER_NODE (one slot is one Slurm task)"),
    "determined.ClusterInfo.gpu_uuids": D("from $CUDA_VISIBLE_DEVICES when it names UUIDs, "
                                          "else asked of nvidia-smi; [] without GPUs"),
    "determined.ClusterInfo.latest_checkpoint": D(
        "the newest checkpoint of the trial whose checksums verify, found by the process "
        "that asks (Determined's master names it)"),
    "determined.ClusterInfo.master_cert_file": D(f"None: {_NO_MASTER}"),
    "determined.ClusterInfo.master_cert_name": D(f"None: {_NO_MASTER}"),
    "determined.ClusterInfo.master_url": D(f"'': {_NO_MASTER}"),
    "determined.ClusterInfo.session_token": D(f"'': {_NO_MASTER} to log in to"),
    "determined.ClusterInfo.slot_ids": D("this node's GPU indices ($SLURM_STEP_GPUS, "
                                         "$SLURM_JOB_GPUS or $CUDA_VISIBLE_DEVICES), else "
                                         "0..n-1 for its CPU slots"),
    "determined.ClusterInfo.task_id": D("<experiment>.<trial> (Determined: "
                                        "<experiment>.<uuid>)"),
    "determined.EnvContext": R(f"{_LEGACY}'s view of a container's environment (EnvContext)",
                               "read det.get_cluster_info() and the DET_* variables"),
    "determined.ExperimentConfig": R(f"{_LEGACY}'s wrapper of the experiment config "
                                     "(ExperimentConfig)",
                                     "read the config as a dict: context.get_experiment_config()"
                                     " in a PyTorchTrial, $DET_EXPERIMENT_CONFIG elsewhere"),
    "determined.InvalidHP": D("raised out of core.init()'s block or Trainer.fit: an early_exit "
                              "record (invalid_hp) and exit 0, as Determined; the daemon tells "
                              "the searcher", path="dethpc.InvalidHP"),
    "determined.InvalidHP.*": S(),
    "determined.LOG_FORMAT": S(),
    "determined.LegacyTrial": R(f"{_LEGACY}'s Trial base class (LegacyTrial)",
                                "subclass det.pytorch.PyTorchTrial, or write a Core API script"),
    "determined.RendezvousInfo": S(),
    "determined.RendezvousInfo.*": S(),
    "determined.ResourcesInfo": S(),
    "determined.ResourcesInfo.*": S(),
    "determined.TrialContext": R(f"{_LEGACY}'s trial context (TrialContext)",
                                 "use det.pytorch.init() (a PyTorchTrialContext) or "
                                 "det.core.init()"),
    "determined.TrialController": R(f"{_LEGACY}'s trial controller (TrialController)",
                                    "run a PyTorchTrial with det.pytorch.Trainer"),
    "determined.TrialInfo": S(),
    "determined.TrialInfo.*": S(),
    "determined.__version__": D("dethpc's version, not Determined's"),
    "determined.core": S(),
    "determined.errors": D("dethpc.common.errors, which defines the classes Determined's "
                           "examples and tests catch, and InvalidExperimentException "
                           "(wrap_lr_scheduler's refusals; an Exception here, a "
                           "BaseException in Determined)", path="dethpc.common.errors"),
    "determined.errors.EnterpriseOnlyError": D("defined, never raised (no Enterprise master)",
                                               path="dethpc.common.errors.EnterpriseOnlyError"),
    "determined.errors.CheckpointNotFound": D(
        "raised for a uuid the trial's checkpoint directory lacks (restore_path, "
        "get_metadata, download, delete)", path="dethpc.common.errors.CheckpointNotFound"),
    "determined.get_cluster_info": S(),
    "determined.import_from_path": S(),
    "determined.util": D("dethpc.common.util, with the helpers Determined's examples use",
                         path="dethpc.common.util"),
    "determined.util.*": S(path="dethpc.common.util"),
    "determined.common.util": D("dethpc.common.util (import it from there)",
                                path="dethpc.common.util"),
    "determined.common.util.*": D("over PyYAML (YAML 1.1: yes/no/on/off load as booleans) "
                                  "instead of ruamel.yaml", path="dethpc.common.util"),
    # ------------------------------------------------------- determined.core
    "determined.core.CheckpointContext": D(_BUILT + "; checkpoints live in the trial "
                                           "directory on the shared filesystem",
                                           signature=False),
    "determined.core.CheckpointContext.*": S(),
    "determined.core.CheckpointContext.delete": D(
        "rank 0 only: hides the checkpoint (.deleted-<uuid>), records checkpoint_deleted in "
        "metrics.jsonl for the daemon, then removes its files"),
    "determined.core.CheckpointContext.download": D("a copy from the shared filesystem after "
                                                    "checking checksums; download_mode "
                                                    "changes nothing"),
    "determined.core.CheckpointContext.restore_path": D(
        "read in place on the shared filesystem after checking checksums; any rank, no "
        "collective; download_mode changes nothing"),
    "determined.core.CheckpointContext.store_path": D(
        "atomic (temp dir, sha256 per file, metadata.json last, rename); metadata must hold "
        "steps_completed"),
    "determined.core.Context": D("built by core.init(); the same keywords (hparams and "
                                 "exit_on_preempt are dethpc's; Determined's private ones are "
                                 "not taken)"),
    "determined.core.Context.*": S(),
    "determined.core.Context.alert": D("logged, and recorded as an alert line of "
                                       "metrics.jsonl (rank 0): the daemon makes it an "
                                       "'alert' experiment event; no webhook"),
    "determined.core.Context.close": D("after an acknowledged preemption, and without an "
                                       "exception, the process exits 80/81 "
                                       "(docs/job-contract.md)"),
    "determined.core.Context.__exit__": D("as close(); det.InvalidHP raised in the block: an "
                                          "early_exit record and exit 0, as Determined"),
    "determined.core.Context.experimental": D(_LOGGED),
    "determined.core.Context.profiler": D("on()/off() are logged and do nothing: no "
                                          "system-metrics profiler (use sstat/seff)"),
    "determined.core.DistributedContext": D("pub_port, pull_port, force_tcp are accepted and "
                                            "ignored: one TCP star on rank 0 "
                                            "($DETHPC_CORE_PORT), or torch's gloo group"),
    "determined.core.DistributedContext.*": S(),
    "determined.core.DistributedContext.allgather_local": D(
        "a collective of every rank of the trial, each keeping its node's part: every rank "
        "must call it (Determined's is per node)"),
    "determined.core.DistributedContext.gather_local": D(
        "a collective of every rank, as allgather_local; the local chief gets the list"),
    "determined.core.DistributedContext.broadcast_local": D(
        "a collective of every rank, as allgather_local; each rank gets its local chief's"),
    "determined.core.DistributedContext.from_tf_config": R(
        "TensorFlow's TF_CONFIG distributed setup (from_tf_config)",
        "dethpc has no TensorFlow launcher: use from_torch_distributed(), from_deepspeed(), "
        "from_horovod() or DistributedContext(rank=..., size=..., ...)"),
    "determined.core.DownloadMode": S(),
    "determined.core.DownloadMode.*": S(),
    "determined.core.DummyCheckpointContext": D(
        "checkpoints go to a directory: storage_manager is its path (or Determined's "
        "shared_fs manager, by its base path), or dethpc's directory=; default ./checkpoints"),
    "determined.core.DummyCheckpointContext.*": S(),
    "determined.core.DummyDistributedContext": S(),
    "determined.core.DummyDistributedContext.*": S(),
    "determined.core.DummyDistributedContext.from_tf_config": R(
        "TensorFlow's TF_CONFIG distributed setup (from_tf_config)",
        "dethpc has no TensorFlow launcher: use from_torch_distributed(), from_deepspeed(), "
        "from_horovod() or DistributedContext(rank=..., size=..., ...)"),
    "determined.core.DummyExperimentalCoreContext": D(_LOGGED),
    "determined.core.DummyExperimentalCoreContext.*": D(_LOGGED),
    "determined.core.DummyPreemptContext": D(
        "never preempts; preempt_mode is checked and kept, should_preempt() makes no "
        "collective call"),
    "determined.core.DummyPreemptContext.*": S(),
    "determined.core.DummyProfilerContext": D(_LOGGED),
    "determined.core.DummyProfilerContext.*": D(_LOGGED),
    "determined.core.DummySearcherContext": D(
        "one operation of length batches, as Determined's; dethpc's keyword target= gives "
        "it a searcher target instead"),
    "determined.core.DummySearcherContext.*": S(),
    "determined.core.DummySearcherOperation": S(),
    "determined.core.DummySearcherOperation.*": S(),
    "determined.core.DummyTrainContext": S(),
    "determined.core.DummyTrainContext.*": S(),
    "determined.core.DummyTrainContext.get_tensorboard_path": D(
        "tensorboard_path, else ./tensorboard (created)"),
    "determined.core.EarlyExitReason": S(),
    "determined.core.EarlyExitReason.*": S(),
    "determined.core.ExperimentalCoreContext": D(_LOGGED + " (no model registry)",
                                                 signature=False),
    "determined.core.ExperimentalCoreContext.*": D(_LOGGED + " (no model registry)"),
    "determined.core.PreemptContext": D(
        _BUILT + "; preemption comes from the pool's signal (USR2/TERM: Slurm preemption "
        "or time limit) or the trial's stop file (pause, searcher stop), not from a master",
        signature=False),
    "determined.core.PreemptContext.*": S(),
    "determined.core.PreemptMode": S(),
    "determined.core.PreemptMode.*": S(),
    "determined.core.PreemptMode.WorkersAskMaster": D(
        "every rank decides alone from its own signal and the stop file (no collective)"),
    "determined.core.ProfilerContext": D("on()/off() are logged and do nothing: no "
                                         "system-metrics profiler (use sstat/seff)"),
    "determined.core.ProfilerContext.*": D("logged, does nothing"),
    "determined.core.SearcherContext": D(_BUILT + "; the target comes from target.json",
                                         signature=False),
    "determined.core.SearcherContext.*": S(),
    "determined.core.SearcherContextMissing": S(),
    "determined.core.SearcherContextMissing.*": S(),
    "determined.core.SearcherMode": S(),
    "determined.core.SearcherMode.*": S(),
    "determined.core.SearcherOperation": D("SearcherOperation(length, unit): made by "
                                           "searcher.operations()", signature=False),
    "determined.core.SearcherOperation.*": S(),
    "determined.core.TensorboardMode": S(),
    "determined.core.TensorboardMode.*": S(),
    "determined.core.TrainContext": D(_BUILT + "; rank 0 appends to the trial's "
                                      "metrics.jsonl, other ranks' reports are no-ops",
                                      signature=False),
    "determined.core.TrainContext.*": S(),
    "determined.core.TrainContext.get_experiment_best_validation": D(
        "computed by the job from the experiment's trials' metrics.jsonl (searcher.metric, "
        "searcher.smaller_is_better)"),
    "determined.core.TrainContext.get_metadata": D(
        "read from trial-metadata.json in the trial directory (None until set)"),
    "determined.core.TrainContext.set_metadata": D(
        "replaces trial-metadata.json in the trial directory (rank 0, atomically) and "
        "records a metadata line for the daemon"),
    "determined.core.TrainContext.get_tensorboard_path": D(
        "<trial dir>/tensorboard on the shared filesystem (created); dethpc tensorboard "
        "serves its files beside the curves it derives"),
    "determined.core.TrainContext.upload_tensorboard_files": D(
        "nothing to upload (the files are on the shared filesystem); MANUAL mode required, "
        "as Determined"),
    "determined.core.TrainContext.report_early_exit": D(
        "an early_exit line in metrics.jsonl (rank 0) that the daemon reads; once per run"),
    "determined.core.TrainContext.report_metrics": D(
        "training/validation as the two methods; another group is kept in metrics.jsonl "
        "(kind metrics), not in the store"),
    "determined.core.TrainContext.report_progress": D("a progress line in metrics.jsonl"),
    "determined.core.TrainContext.set_status": D("logged (no WebUI)"),
    "determined.core.Unit": S(),
    "determined.core.Unit.*": S(),
    "determined.core.init": D(
        "returns the Context to use with `with` (or start()/close()); without distributed, an "
        "initialized torch process group is used; checkpoint_storage: a directory off-cluster, "
        "ignored in a trial; env, stop_check_interval_s, exit_on_preempt are dethpc's"),
    # ---------------------------------------------------- determined.launch
    "determined.launch.torch_distributed": D(
        "runs dethpc.launch.torch_distributed: srun, or torchrun when overrides come before "
        "--", path="dethpc.launch.torch_distributed"),
    "determined.launch.torch_distributed.*": S(),
    "determined.launch.deepspeed": D("runs dethpc.launch.deepspeed (srun, one task per slot)",
                                     path="dethpc.launch.deepspeed"),
    "determined.launch.deepspeed.*": S(),
    "determined.launch.horovod": D("runs dethpc.launch.horovod (MPI under srun); overrides "
                                   "(horovodrun flags) are refused at submit with the "
                                   "HOROVOD_* variable to set instead",
                                   path="dethpc.launch.horovod"),
    "determined.launch.horovod.*": S(),
    "determined.launch.horovod.--autohorovod": D("dropped (Determined's internal flag)"),
    "determined.launch.tensorflow": R("the TensorFlow launcher (determined.launch.tensorflow)",
                                      "refused at submit, and in a trial's job python -m "
                                      "determined.launch.tensorflow exits 2 saying so: run "
                                      "the script directly for one slot"),
    "determined.launch.wrap_rank": S("runs dethpc.launch.wrap_rank: the command's output "
                                     "lines prefixed [rank=N], its exit status; bytes pass "
                                     "undecoded", path="dethpc.launch.wrap_rank"),
    "determined.launch.wrap_rank.*": S(),
    "determined.launch.wrap_rank.--no-redirect-stdio": D(
        "accepted, changes nothing: Determined's redirects to its container's log files, "
        "a Slurm job's output goes to the job's log either way"),
    # --------------------------------------------------- determined.pytorch
    "determined.pytorch.Batch": S(),
    "determined.pytorch.Batch.*": S(),
    "determined.pytorch.Epoch": S(),
    "determined.pytorch.Epoch.*": S(),
    "determined.pytorch.TrainUnit": S("an int value (a length or a period) or a container "
                                      "of steps (a schedule of a period)"),
    "determined.pytorch.TrainUnit.*": S(),
    "determined.pytorch.CheckpointLoadContext": S("one process, no trial directory"),
    "determined.pytorch.CheckpointLoadContext.*": S(),
    "determined.pytorch.CheckpointLoadContext.configure_apex_amp": _APEX,
    "determined.pytorch.CheckpointLoadContext.run_cross_slot_reduction": _CROSS_SLOT,
    "determined.pytorch.load_trial_from_checkpoint_path": D(
        "the trial class is imported from the model directory the trial ran in (recorded in "
        "load_data.json: dethpc checkpoints hold no code/ copy), else from code/ "
        "(Determined's checkpoints load too), else sys.path"),
    "determined.pytorch.DataLoader": D("torch's DataLoader under Determined's name: the "
                                       "Trainer shards, seeds and resumes it"),
    "determined.pytorch.DataLoader.*": S(),
    "determined.pytorch.DataLoader.get_data_loader": D(
        "returns the loader itself for Determined's defaults (Determined's: a copy); "
        "repeat/skip/num_replicas over Determined's sampler chain, as Determined's"),
    "determined.pytorch.LRScheduler": S(),
    "determined.pytorch.LRScheduler.*": S(),
    "determined.pytorch.LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP": D(
        "every batch (one optimizer step per batch: no gradient aggregation)"),
    "determined.pytorch.MetricReducer": S(),
    "determined.pytorch.MetricReducer.*": S(),
    "determined.pytorch.PyTorchCallback": S("every hook, in the order of Determined's "
                                            "Trainer; state_dict() saved in each checkpoint"),
    "determined.pytorch.PyTorchCallback.*": S(),
    "determined.pytorch.PyTorchExperimentalContext": D("context.experimental",
                                                       signature=False),
    "determined.pytorch.PyTorchExperimentalContext.*": S(),
    "determined.pytorch.PyTorchExperimentalContext.disable_dataset_reproducibility_checks": D(
        "nothing to disable: the Trainer rebuilds the loaders itself"),
    "determined.pytorch.PyTorchExperimentalContext.use_amp": S(_CUDA_AMP),
    "determined.pytorch.PyTorchTrial": S(),
    "determined.pytorch.PyTorchTrial.*": S(),
    "determined.pytorch.PyTorchTrial.evaluate_full_dataset": S(
        "on the chief, over the whole validation loader, as Determined's"),
    "determined.pytorch.PyTorchTrial.evaluation_reducer": S(
        "AVG, SUM, MAX, MIN per metric, over the batches of every rank, as Determined's"),
    "determined.pytorch.PyTorchTrial.get_batch_length": D(
        "not called: the Trainer counts batches (records are refused as a unit)"),
    "determined.pytorch.PyTorchTrial.trial_context_class": D(_TRIAL_CLASSES),
    "determined.pytorch.PyTorchTrial.trial_controller_class": D(_TRIAL_CLASSES),
    "determined.pytorch.PyTorchTrialContext": D("built by det.pytorch.init() (or "
                                                "PyTorchTrialContext(core_context))",
                                                signature=False),
    "determined.pytorch.PyTorchTrialContext.*": S(),
    "determined.pytorch.PyTorchTrialContext.autocast_forward_pass": D(
        "returns the module itself with forward hooks (Determined's returns a proxy of "
        "it); " + _CUDA_AMP),
    "determined.pytorch.PyTorchTrialContext.configure_apex_amp": _APEX,
    "determined.pytorch.PyTorchTrialContext.run_cross_slot_reduction": _CROSS_SLOT,
    "determined.pytorch.PyTorchTrialContext.lr_schedulers": S(),
    "determined.pytorch.PyTorchTrialContext.profiler": S(),
    "determined.pytorch.PyTorchTrialContext.set_profiler": S(),
    "determined.pytorch.PyTorchTrialContext.set_enable_tensorboard_logging": D(
        "kept for get_enable_tensorboard_logging(); the Trainer's metrics reach TensorBoard "
        "through dethpc tensorboard either way"),
    "determined.pytorch.PyTorchTrialContext.set_stop_requested": D(
        "at the next reporting, validation or checkpoint boundary (as Determined's) the "
        "Trainer checkpoints, records an early exit (user_requested_stop) and returns"),
    "determined.pytorch.PyTorchTrialContext.get_tensorboard_writer": D(
        "a torch.utils.tensorboard.SummaryWriter on get_tensorboard_path()"),
    "determined.pytorch.PyTorchTrialContext.wrap_optimizer": D(
        "backward_passes_per_step must be 1 and fp16_compression unset (refused otherwise)"),
    "determined.pytorch.PyTorchTrialContext.wrap_model": D(
        "moved to the device, wrapped in DistributedDataParallel with more than one rank"),
    "determined.pytorch.Reducer": S(),
    "determined.pytorch.Reducer.*": S(),
    "determined.pytorch.TorchData": S(),
    "determined.pytorch.Trainer": S(),
    "determined.pytorch.Trainer.configure_profiler": D("logged, nothing is profiled"),
    "determined.pytorch.Trainer.fit": D(
        "reporting_period defaults to Batch(10) (Determined's: Batch(100)); training "
        "metrics are also reported at each validation and checkpoint, as Determined's; "
        "checkpoint_policy as Determined's (best off-cluster is all, as its local mode; on "
        "a cluster best compares with the experiment's best validation in the trials' "
        "metrics files); profiling_enabled is ignored; max_length decides under single, "
        "random and grid and searcher.max_length only stands in for a None, as "
        "Determined's; under ASHA a longer max_length ends at max_time, where Determined "
        "trains on until its searcher's stop (a shorter one ends the trial and one that "
        "is not ASHA's max_time is warned about, as Determined's); a Batch/Epoch "
        "schedule of steps is a period, never a length, as Determined's"),
    "determined.pytorch.adapt_batch_sampler": _SAMPLERS,
    "determined.pytorch.data_length": S(),
    "determined.pytorch.init": D("aggregation_frequency must be 1; exp_conf is what "
                                 "get_experiment_config() answers off-cluster (in a trial, the "
                                 "trial's config.yaml); enable_tensorboard_logging has no "
                                 "effect"),
    "determined.pytorch.samplers": _SAMPLERS,
    "determined.pytorch.samplers.*": _SAMPLERS,
    "determined.pytorch.to_device": S(),
    "determined.pytorch.deepspeed.*": S(),
    "determined.pytorch.deepspeed.DeepSpeedTrial.get_batch_length": D(
        "not called: the Trainer counts batches (records are refused as a unit)"),
    "determined.pytorch.deepspeed.DeepSpeedTrial.trial_context_class": D(_TRIAL_CLASSES),
    "determined.pytorch.deepspeed.DeepSpeedTrial.trial_controller_class": D(_TRIAL_CLASSES),
    "determined.pytorch.deepspeed.DeepSpeedTrialContext": D(
        "built by det.pytorch.deepspeed.init() (or DeepSpeedTrialContext(core_context)); "
        "CPU training is allowed (Determined's requires a GPU); it is a PyTorchTrialContext "
        "whose wrap_model, wrap_optimizer, wrap_lr_scheduler, backward and step_optimizer "
        "say that the engine does that", signature=False),
    "determined.pytorch.deepspeed.DeepSpeedTrialContext.run_cross_slot_reduction":
        _CROSS_SLOT,
    "determined.pytorch.deepspeed.DeepSpeedTrialContext.profiler": S(
        "the torch profiler set_profiler() built (None before), as Determined's"),
    "determined.pytorch.deepspeed.DeepSpeedTrialContext.set_profiler": S(
        "a torch.profiler.profile of these arguments, entered around each train_batch and "
        "stepped, its traces under the TensorBoard path, as Determined's"),
    "determined.pytorch.deepspeed.DeepSpeedTrialContext.set_enable_tensorboard_logging": D(
        "kept for get_enable_tensorboard_logging(); the Trainer's metrics reach TensorBoard "
        "through dethpc tensorboard either way"),
    "determined.pytorch.deepspeed.DeepSpeedTrialContext.set_stop_requested": D(
        "the Trainer checkpoints, records an early exit (user_requested_stop) and returns"),
    "determined.pytorch.deepspeed.DeepSpeedTrialContext.get_tensorboard_writer": D(
        "a torch.utils.tensorboard.SummaryWriter on get_tensorboard_path()"),
    "determined.pytorch.deepspeed.DeepSpeedTrialController": R(
        f"{_LEGACY}'s DeepSpeed trial controller (DeepSpeedTrialController)",
        "use det.pytorch.deepspeed.Trainer(trial, context).fit()"),
    "determined.pytorch.deepspeed.Trainer.fit": D(
        "the PyTorch Trainer's loop and its differences (see determined.pytorch.Trainer.fit); "
        "checkpoints hold the engines' save_checkpoint directories (model<i>) and state.pt "
        "(progress, every rank's RNG state, callbacks) in place of Determined's "
        "det_state_dict_rank<r>.pth and trial_state.pkl; leftover micro batches at an "
        "epoch's end (fewer than a batch's gradient accumulation steps) are skipped"),
    "determined.pytorch.deepspeed.init": D(
        "exp_conf is not read (the trial's config.yaml is); enable_tensorboard_logging has "
        "no effect; preempt_mode and exit_on_preempt as det.pytorch.init()'s"),
}

_ONLY_SLURM = "Determined's Slurm/PBS launcher's own detail of its containers"
_K8S = "Kubernetes only (dethpc runs on Slurm)"
_GC = "Determined's checkpoint-GC task's input (dethpc's GC runs in the daemon)"
_SHIP = "Determined's log shipper's setting (the job's output goes to its Slurm log)"
_SDK = "read by Determined's CLI/SDK to reach a master; there is no master"

ENV_RULES: dict[str, Rule] = {
    "$DET_AGENT_ID": D("the node's name ($SLURMD_NODENAME, else the hostname), as "
                       "Determined's Slurm launcher; per node under dethpc's launchers"),
    "$DET_ALLOCATION_ID": D("<experiment>.<trial>.<run>, the run counted from 1"),
    "$DET_B64_ENCODED_ENVVARS": A("Determined's Singularity wrapper's transport of the "
                                  "environment"),
    "$DET_CHIEF_IP": S("set by dethpc's launchers to rank 0's node, as Determined's"),
    "$DET_CLUSTER_ID": D("the Slurm cluster's name ($SLURM_CLUSTER_NAME)"),
    "$DET_CONTAINER_ID": D("[cont=<node index>], as Determined's Slurm launcher "
                           "([cont=$SLURM_PROCID], one container per node)"),
    "$DET_CONTAINER_LOCAL_TMP": A(_ONLY_SLURM + " (/tmp per container)"),
    "$DET_DEBUG": A("set by Determined's master for TensorBoard tasks only"),
    "$DET_DEBUG_CONFIG_PATH": A("Determined's CLI's debug setting"),
    "$DET_DEEPSPEED_HOSTFILE_PATH": A("Determined's DeepSpeed launcher's pdsh hostfile; "
                                      "dethpc's starts ranks with srun"),
    "$DET_DELETE": A(_GC),
    "$DET_DELETE_TENSORBOARDS": A(_GC),
    "$DET_DRY_RUN": A(_GC),
    "$DET_EXPERIMENT_CONFIG": D("the experiment config as submitted (config.yaml, overrides "
                                "applied) as compact JSON; Determined's has its defaults "
                                "filled in"),
    "$DET_EXPERIMENT_ID": S(),
    "$DET_GLOB": A(_GC),
    "$DET_HPARAMS": S("the trial's hyperparameters as JSON (hparams.json)"),
    "$DET_INTER_NODE_NETWORK_INTERFACE": D("the pool's socket_ifname, when set"),
    "$DET_K8S_RESOURCE_POOL": A(_K8S),
    "$DET_KUBERNETES_JOB_PARALLELISM": A(_K8S),
    "$DET_KUBERNETES_POD_IP": A(_K8S),
    "$DET_LATEST_CHECKPOINT": D("the newest complete checkpoint of the trial when the run "
                                "starts (metadata.json present; not re-hashed), unset when "
                                "there is none"),
    "$DET_LOCALTMP": A(_ONLY_SLURM + " (container-local directory)"),
    "$DET_LOG_LEVEL": A(_GC),
    "$DET_LOG_WAIT_TIME": A(_SHIP),
    "$DET_MANUAL_INIT_DISTRIBUTED": A(
        "read by Determined's DeepSpeedTrial controller to skip its own process-group "
        "setup; dethpc's init() joins an existing process group itself"),
    "$DET_MASTER": A(_SDK),
    "$DET_MASTER_ADDR": A(_SDK),
    "$DET_MASTER_CERT_FILE": A(_SDK),
    "$DET_MASTER_CERT_NAME": A(_SDK),
    "$DET_MASTER_HOST": A(_SDK),
    "$DET_MASTER_IP": A(_SDK),
    "$DET_MASTER_PORT": A(_SDK),
    "$DET_NOTEBOOK_TOKEN": A("a notebook task's, not a trial's"),
    "$DET_PASS": A(_SDK),
    "$DET_PROXY_THROUGH_GATEWAY": A(_K8S),
    "$DET_PYTHON_EXECUTABLE": A("Determined's entrypoint's choice of python; dethpc runs the "
                                "cluster config's python"),
    "$DET_RELEASE_NAMESPACE": A(_K8S),
    "$DET_RESOURCES_ID": D("the Slurm job's id ($SLURM_JOB_ID)"),
    "$DET_RESOURCES_TYPE": S("slurm-job, as Determined's Slurm launcher"),
    "$DET_RETRY_CONFIG": A("Determined's SDK's HTTP retry setting"),
    "$DET_RUN_DIR": A("Determined's in-container /run/determined; the trial's files are in "
                      "$DETHPC_TRIAL_DIR"),
    "$DET_S3_ENDPOINT_URL": A("a TensorBoard task's storage setting"),
    "$DET_SEGMENT_API_KEY": A("Determined's telemetry; dethpc sends none"),
    "$DET_SEGMENT_ENABLED": A("Determined's telemetry; dethpc sends none"),
    "$DET_SESSION_TOKEN": A(_SDK),
    "$DET_SHIPPER_EMIT_STDOUT_LOGS": A(_SHIP),
    "$DET_SHIP_LOGS_PATH": A(_SHIP),
    "$DET_SKIP_PIP_INSTALL": A("Determined's task setup's pip install of its harness; "
                               "dethpc installs nothing in a job"),
    "$DET_SLOT_IDS": D("this node's slot ids as JSON ([0,1], GPU indices, else 0..n-1 for "
                       "its CPU slots); per node under dethpc's launchers"),
    "$DET_SLOT_TYPE": D("cuda on a GPU pool, cpu otherwise (rocm is not told apart)"),
    "$DET_SLURM_PROXY_IFACE": A(_ONLY_SLURM + " (proxy interface)"),
    "$DET_SLURM_RENDEZVOUS_IFACE": A(_ONLY_SLURM + " (rendezvous interface)"),
    "$DET_STEPS_COMPLETED": D("the steps_completed of $DET_LATEST_CHECKPOINT, else 0"),
    "$DET_STORAGE_CONFIG": A(_GC),
    "$DET_TASK_ID": D("<experiment>.<trial>"),
    "$DET_TASK_LOGGING_METADATA": A(_SHIP),
    "$DET_TASK_TYPE": S("TRIAL"),
    "$DET_TRIAL_ID": S(),
    "$DET_TRIAL_RUN_ID": S("the run counted from 1 ($SLURM_RESTART_COUNT + 1, the worker "
                           "pool's attempt + 1)"),
    "$DET_TRIAL_SEED": D("experiment_seed + trial id (Determined's searcher draws one)"),
    "$DET_UNIQUE_PORT_OFFSET": D("the node's first GPU index (0 on CPU), as Determined's "
                                 "Slurm launcher"),
    "$DET_USER": D("the Unix user the job runs as ($USER)"),
    "$DET_USER_TOKEN": A(_SDK),
    "$DET_USE_TLS": A(_SDK),
    "$DET_WORKDIR": S("the trial's working directory (the snapshot of the model directory)"),
}


# ----------------------------------------------------------------------- lookups
def entry_key(entry: Mapping[str, Any]) -> str:
    """The table key of an inventory entry: Determined's dotted name."""
    return f"{entry['module']}.{entry['name']}"


def rule_for(key: str) -> tuple[str, Rule] | None:
    """The line of the table that classifies ``key`` (and its key): its own line, else
    the nearest ``<outer>.*`` line, else the refusal of an outer name; None when none."""
    if key.startswith("$"):
        found = ENV_RULES.get(key)
        return (key, found) if found is not None else None
    if key in RULES:
        return key, RULES[key]
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        outer = ".".join(parts[:cut])
        if f"{outer}.*" in RULES:
            return f"{outer}.*", RULES[f"{outer}.*"]
        if outer in RULES and RULES[outer].status == REFUSED:
            return outer, RULES[outer]
    return None


def dethpc_path(key: str) -> str:
    """Where dethpc serves Determined's ``key``: the rule's path (for a ``.*`` line, in
    place of its prefix), else ``determined`` replaced by ``dethpc``."""
    found = rule_for(key)
    if found is not None and found[1].path is not None:
        matched, rule = found
        assert rule.path is not None
        if matched.endswith(".*"):
            prefix = matched[:-2]
            return rule.path + key[len(prefix):]
        return rule.path
    return "dethpc" + key[len("determined"):]


def short(key: str) -> str:
    """``det.core.X`` for ``determined.core.X`` (as users spell it)."""
    return "det" + key[len("determined"):] if key.startswith("determined") else key


def refusal(key: str) -> str:
    """The message a refused name raises: what it is in Determined, what to do instead."""
    found = rule_for(key)
    if found is None or found[1].status != REFUSED:
        return (f"{short(key)} is part of Determined's API that dethpc does not offer "
                "(docs/core-api.md lists what is served)")
    rule = found[1]
    return (f"{short(key)} is not available on dethpc ({rule.feature}). Instead: "
            f"{rule.note} (docs/core-api.md)")


# ----------------------------------------------------------------------- the doc
DOC_BEGIN = "<!-- BEGIN generated by scripts/determined_inventory.py --doc: do not edit -->"
DOC_END = "<!-- END generated -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def counts(inventory: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """``{"names": {status: n}, "environment": {status: n}}`` (unclassified: ``?``)."""
    out: dict[str, dict[str, int]] = {"names": {}, "environment": {}}
    for entry in inventory["names"]:
        found = rule_for(entry_key(entry))
        status = found[1].status if found else "?"
        out["names"][status] = out["names"].get(status, 0) + 1
    for var in inventory["environment"]:
        found = rule_for("$" + var["name"])
        status = found[1].status if found else "?"
        out["environment"][status] = out["environment"].get(status, 0) + 1
    return out


def _what(rule: Rule, key: str) -> str:
    if rule.status == REFUSED:
        return f"{rule.feature}. Instead: {rule.note}"
    if rule.status in (SERVED, DIFFERENT):
        where = dethpc_path(key)
        default = "dethpc" + key[len("determined"):]
        at = f"at `{where}`; " if where != default else ""
        return at + rule.note
    return rule.note


def _name_rows(entries: list[Mapping[str, Any]]) -> list[str]:
    """One row per entry with a line of its own; the members one line covers share one
    row, where the first of them comes."""
    groups: dict[str, list[str]] = {}
    for entry in entries:
        found = rule_for(entry_key(entry))
        if found is not None and found[0] != entry_key(entry):
            groups.setdefault(found[0], []).append(entry["name"].rsplit(".", 1)[-1])
    rows: list[str] = []
    done: set[str] = set()
    for entry in entries:
        key = entry_key(entry)
        found = rule_for(key)
        if found is None:
            rows.append(f"| `{short(key)}` | **unclassified** | |")
            continue
        matched, rule = found
        if matched == key:
            rows.append(f"| `{short(key)}` ({entry['kind']}) | {rule.status} | "
                        f"{_cell(_what(rule, key))} |")
        elif matched not in done:
            done.add(matched)
            base = matched[:-2] if matched.endswith(".*") else matched
            names = ", ".join(f"`{n}`" for n in sorted(set(groups[matched])))
            what = _what(rule, base) if rule.status == REFUSED or rule.path is None \
                else f"at `{rule.path}`; {rule.note}"
            rows.append(f"| `{short(base)}`: {names} | {rule.status} | {_cell(what)} |")
    return rows


def doc_table(inventory: Mapping[str, Any]) -> str:
    """docs/core-api.md's generated section: every inventory name and variable with its
    class and what happens, module by module."""
    det = inventory["determined"]
    tally = counts(inventory)
    names = sum(tally["names"].values())
    env = sum(tally["environment"].values())

    def summary(part: dict[str, int]) -> str:
        return ", ".join(f"{n} {status}" for status, n in sorted(part.items()))

    lines = [DOC_BEGIN, "",
             f"Determined {det['version']} (`{det.get('tag', '')}`, "
             f"{det.get('commit', '')[:12]}): {names} names ({summary(tally['names'])}); "
             f"{env} `DET_*` variables ({summary(tally['environment'])}).", ""]
    modules: dict[str, list[Mapping[str, Any]]] = {}
    for entry in inventory["names"]:
        modules.setdefault(entry["module"], []).append(entry)
    for module in sorted(modules):
        lines += [f"### `{short(module)}`", "", "| Determined | class | on dethpc |",
                  "| --- | --- | --- |"]
        lines += _name_rows(modules[module])
        lines.append("")
    lines += ["### `DET_*` variables of a trial", "",
              "| variable | class | on dethpc | found in Determined's source |",
              "| --- | --- | --- | --- |"]
    for var in inventory["environment"]:
        found = rule_for("$" + var["name"])
        status, note = (found[1].status, found[1].note) if found else ("**unclassified**", "")
        where = var["found_in"][0] + (f" (+{len(var['found_in']) - 1})"
                                      if len(var["found_in"]) > 1 else "")
        lines.append(f"| `{var['name']}` | {status} | {_cell(note)} | `{where}` |")
    lines += ["", DOC_END]
    return "\n".join(lines) + "\n"
