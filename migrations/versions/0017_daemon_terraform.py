"""provisioner daemons report the Terraform they run (binary and version); jobs carry the template's
required_version constraints

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 15:30:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('required_terraform', sa.String(length=255), nullable=True))
    with op.batch_alter_table('provisioner_daemons', schema=None) as batch_op:
        batch_op.add_column(sa.Column('terraform_binary', sa.String(length=16), server_default='', nullable=False))
        batch_op.add_column(sa.Column('terraform_version', sa.String(length=32), server_default='', nullable=False))


def downgrade():
    with op.batch_alter_table('provisioner_daemons', schema=None) as batch_op:
        batch_op.drop_column('terraform_version')
        batch_op.drop_column('terraform_binary')
    with op.batch_alter_table('provisioner_jobs', schema=None) as batch_op:
        batch_op.drop_column('required_terraform')
