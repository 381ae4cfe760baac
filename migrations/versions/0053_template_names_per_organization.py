"""templates: a name is unique within its organisation (two organisations may each have a template called python)

Revision ID: 0053
Revises: 0052
Create Date: 2026-11-28 22:00:00.000000

"""

from alembic import op


# revision identifiers, used by Alembic.
revision = "0053"
down_revision = "0052"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("templates") as batch_op:
        batch_op.drop_constraint("uq_templates_name", type_="unique")
        batch_op.create_unique_constraint("uq_templates_organization_id_name", ["organization_id", "name"])


def downgrade():
    # Refused (by the database) once two organisations hold templates of the same name: rename one first.
    with op.batch_alter_table("templates") as batch_op:
        batch_op.drop_constraint("uq_templates_organization_id_name", type_="unique")
        batch_op.create_unique_constraint("uq_templates_name", ["name"])
