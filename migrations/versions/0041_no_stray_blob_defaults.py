"""two encrypted columns lose the empty default 0009 left behind on SQLite (PostgreSQL's was dropped then), so that a
database created from the models and one built by the migrations are the same

Revision ID: 0041
Revises: 0040
Create Date: 2026-11-28 03:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0041'
down_revision = '0040'
branch_labels = None
depends_on = None

COLUMNS = (('template_versions', 'user_variable_values'), ('workspace_agents', 'definition'))


def upgrade():
    if op.get_bind().dialect.name != 'sqlite':
        return
    for table, column in COLUMNS:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column(column, existing_type=sa.LargeBinary(), existing_nullable=False, server_default=None)


def downgrade():
    if op.get_bind().dialect.name != 'sqlite':
        return
    for table, column in COLUMNS:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column(
                column, existing_type=sa.LargeBinary(), existing_nullable=False, server_default=sa.text("X''")
            )
