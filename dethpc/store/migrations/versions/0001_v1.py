"""v1: the schema of dethpc <= 3b2ae8d (``SCHEMA_VERSION = 1``, made by ``create_all``).

Revision ID: 0001
Revises: (none)

Exactly the tables, columns, types, nullability, keys and indexes that sqlmodel created
from the v1 models, including ``schemainfo`` with its row (version 1). A pre-Alembic v1
database is stamped with this revision instead of running it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TABLES = ("metric", "checkpoint", "job", "batch", "trial", "searcherstate", "ingestoffset",
           "event", "experiment", "schemainfo")


def upgrade() -> None:
    op.create_table(
        "schemainfo",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "experiment",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("description", sa.String(), nullable=False),
        sa.Column("labels_json", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("config_yaml", sa.String(), nullable=False),
        sa.Column("run_dir", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("backend", sa.String(), nullable=False),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("message", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("message", sa.String(), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_event_experiment_id", "event", ["experiment_id"])
    op.create_table(
        "ingestoffset",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("file", sa.String(), nullable=False),
        sa.Column("offset", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("trial_id", "file"),
    )
    op.create_table(
        "searcherstate",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("snapshot_json", sa.String(), nullable=False),
        sa.Column("events_applied", sa.Integer(), nullable=False),
        sa.Column("initialized", sa.Boolean(), nullable=False),
        sa.Column("shutdown", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiment.id"]),
        sa.PrimaryKeyConstraint("experiment_id"),
    )
    op.create_table(
        "trial",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("hparams_json", sa.String(), nullable=False),
        sa.Column("target_length", sa.Integer(), nullable=False),
        sa.Column("validate_at_json", sa.String(), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("steps_completed", sa.Integer(), nullable=False),
        sa.Column("best_validation", sa.Float(), nullable=True),
        sa.Column("latest_validation", sa.Float(), nullable=True),
        sa.Column("latest_checkpoint", sa.String(), nullable=True),
        sa.Column("exit_reason", sa.String(), nullable=False),
        sa.Column("needs_job", sa.Boolean(), nullable=False),
        sa.Column("stop_requested_at", sa.Float(), nullable=True),
        sa.Column("stop_reason", sa.String(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiment.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_trial_experiment_id", "trial", ["experiment_id"])
    op.create_table(
        "batch",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("array_job_id", sa.String(), nullable=True),
        sa.Column("pool", sa.String(), nullable=False),
        sa.Column("throttle", sa.Integer(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiment.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_batch_experiment_id", "batch", ["experiment_id"])
    op.create_table(
        "job",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("batch_id", sa.Integer(), nullable=False),
        sa.Column("array_index", sa.Integer(), nullable=False),
        sa.Column("ref", sa.String(), nullable=True),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("raw_state", sa.String(), nullable=False),
        sa.Column("restart_count", sa.Integer(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_reason", sa.String(), nullable=False),
        sa.Column("exit_run", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.String(), nullable=False),
        sa.Column("live", sa.Boolean(), nullable=False),
        sa.Column("submitted_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiment.id"]),
        sa.ForeignKeyConstraint(["trial_id"], ["trial.id"]),
        sa.ForeignKeyConstraint(["batch_id"], ["batch.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_job_ref", "job", ["ref"])
    op.create_index("ix_job_trial_id", "job", ["trial_id"])
    op.create_index("ix_job_experiment_id", "job", ["experiment_id"])
    op.create_index("ix_job_batch_id", "job", ["batch_id"])
    op.create_table(
        "checkpoint",
        sa.Column("uuid", sa.String(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("steps_completed", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(), nullable=False),
        sa.Column("metadata_json", sa.String(), nullable=False),
        sa.Column("validation_metric", sa.Float(), nullable=True),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiment.id"]),
        sa.ForeignKeyConstraint(["trial_id"], ["trial.id"]),
        sa.PrimaryKeyConstraint("uuid"),
    )
    op.create_index("ix_checkpoint_experiment_id", "checkpoint", ["experiment_id"])
    op.create_index("ix_checkpoint_trial_id", "checkpoint", ["trial_id"])
    op.create_table(
        "metric",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("metrics_json", sa.String(), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["trial_id"], ["trial.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_metric_trial_id", "metric", ["trial_id"])
    # the v1 code inserted this row on first open; a v1 dethpc can open this database too
    op.execute("INSERT INTO schemainfo (id, version) VALUES (1, 1)")


def downgrade() -> None:
    for table in _TABLES:
        op.drop_table(table)
