"""provisioner jobs have a priority: high (a person waits) or low (the lifecycle executor queued it)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 14:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade():
    # Jobs queued before priorities wait on the high queue of their tag set (their queue name is unchanged).
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('priority', sa.String(length=8), server_default='high', nullable=False))


def downgrade():
    # Without priorities every job waits on its tag set's one queue.
    op.execute("UPDATE provisioner_jobs SET queue = replace(queue, '#low', '')")
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.drop_column('priority')
