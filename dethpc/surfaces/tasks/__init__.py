"""Tasks: the non-trial processes and jobs a user starts, lists and stops (one model,
``dethpc.store.models.Task``): TensorBoard (``dethpc.surfaces.tasks.tensorboard``) now; notebooks,
shells and commands (issue 18) later, through ``dethpc.surfaces.tasks.registry``."""
