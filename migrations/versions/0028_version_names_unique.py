"""a template's versions have names unique within it: a failed and a good version can no longer share one (later
duplicates are renamed <name>-2, <name>-3, ... first)

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-27 03:20:00.000000

"""
import sqlalchemy as sa
from alembic import op


# revision identifiers, used by Alembic.
revision = '0028'
down_revision = '0027'
branch_labels = None
depends_on = None


def upgrade():
    connection = op.get_bind()
    rows = connection.execute(
        sa.text(
            'SELECT id, template_id, name FROM template_versions WHERE template_id IS NOT NULL '
            'ORDER BY template_id, created_at, id'
        )
    ).all()
    taken = {(template_id, name) for _, template_id, name in rows}
    seen = set()
    for version_id, template_id, name in rows:
        if (template_id, name) not in seen:
            seen.add((template_id, name))
            continue
        number = 2
        while (template_id, f'{name[:58]}-{number}') in taken:
            number += 1
        renamed = f'{name[:58]}-{number}'
        taken.add((template_id, renamed))
        seen.add((template_id, renamed))
        connection.execute(
            sa.text('UPDATE template_versions SET name = :name WHERE id = :id'), {'name': renamed, 'id': version_id}
        )
    with op.batch_alter_table('template_versions', schema=None) as batch_op:
        batch_op.create_index('uq_template_versions_template_id_name', ['template_id', 'name'], unique=True)


def downgrade():
    with op.batch_alter_table('template_versions', schema=None) as batch_op:
        batch_op.drop_index('uq_template_versions_template_id_name')
