"""indexes in the order of the jobs and users lists, so that a deep page is read by key from its previous page's
last row (app/core/keyset.py) rather than sorted; (created_at, id) serves all that created_at alone did

Revision ID: 0039
Revises: 0038
Create Date: 2026-11-28 02:40:00.000000

"""
from alembic import op


# revision identifiers, used by Alembic.
revision = '0039'
down_revision = '0038'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.create_index('ix_provisioner_jobs_created_at_id', ['created_at', 'id'], unique=False)
        batch_op.drop_index('ix_provisioner_jobs_created_at')
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.create_index('ix_users_username_id', ['username', 'id'], unique=False)


def downgrade():
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_index('ix_users_username_id')
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.create_index('ix_provisioner_jobs_created_at', ['created_at'], unique=False)
        batch_op.drop_index('ix_provisioner_jobs_created_at_id')
