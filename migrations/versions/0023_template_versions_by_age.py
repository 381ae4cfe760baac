"""a template's versions are listed newest first a page at a time: an index on (template_id, created_at, id)
replaces the one on template_id alone

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-26 20:45:00.000000

"""
from alembic import op


# revision identifiers, used by Alembic.
revision = '0023'
down_revision = '0022'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('template_versions', schema=None) as batch_op:
        batch_op.create_index(
            'ix_template_versions_template_id_created_at', ['template_id', 'created_at', 'id'], unique=False
        )
        batch_op.drop_index('ix_template_versions_template_id')


def downgrade():
    with op.batch_alter_table('template_versions', schema=None) as batch_op:
        batch_op.create_index('ix_template_versions_template_id', ['template_id'], unique=False)
        batch_op.drop_index('ix_template_versions_template_id_created_at')
