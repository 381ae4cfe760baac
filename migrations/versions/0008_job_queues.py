"""provisioner jobs record their queue (daemons waiting over HTTP find their jobs by it)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 22:10:00

"""
import json

from alembic import op
import sqlalchemy as sa

from protocol.tags import queue_name


# revision identifiers, used by Alembic.
revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('queue', sa.Text(), nullable=True))
    jobs = sa.table('provisioner_jobs', sa.column('id', sa.String), sa.column('tags', sa.JSON), sa.column('queue', sa.Text))
    connection = op.get_bind()
    for job_id, tags in connection.execute(sa.select(jobs.c.id, jobs.c.tags)).all():
        tags = json.loads(tags) if isinstance(tags, str) else (tags or {})
        connection.execute(jobs.update().where(jobs.c.id == job_id).values(queue=queue_name(tags)))
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.alter_column('queue', existing_type=sa.Text(), nullable=False)
        batch_op.create_index(batch_op.f('ix_provisioner_jobs_queue'), ['queue'], unique=False)


def downgrade():
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_provisioner_jobs_queue'))
        batch_op.drop_column('queue')
