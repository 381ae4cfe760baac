"""The dashboard's side of groups and template permissions: the Groups pages, the Permissions tab, the Users page's
groups column, and a template page that says who may use it and shows admin actions only to its admins."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, import_template
from tests.support.permissions import more_personas
from tests.support.web import csrf_token, post_form, sign_in

pytestmark = pytest.mark.databases("sqlite")


@pytest.fixture
def people(app: Flask, personas: dict[str, Persona]) -> dict[str, Persona]:
    return more_personas(app, personas)


def signed_in(app: Flask, name: str) -> FlaskClient:
    client = app.test_client()
    sign_in(client, f"{name}@example.com", PASSWORD)
    return client


def test_a_user_admin_builds_a_group_on_the_groups_pages(app: Flask, people: dict[str, Persona]) -> None:
    frank = signed_in(app, "frank")
    assert frank.post("/groups", data={"name": "ml"}).status_code == 400, "CSRF is required"
    created = post_form(frank, "/groups", {"name": "ml", "display_name": "Machine learning"})
    assert created.status_code == 302
    group_url = created.headers["Location"]
    bad = post_form(frank, "/groups", {"name": "ml"}, token_from="/groups")
    assert bad.status_code == 409 and "This name is taken." in bad.get_data(as_text=True)
    for name in ("carol", "dave"):
        added = post_form(frank, f"{group_url}/members", {"username": name}, token_from=group_url)
        assert added.status_code == 302
    nobody = post_form(frank, f"{group_url}/members", {"username": "nobody"}, token_from=group_url)
    assert nobody.status_code == 404 and "No such user" in nobody.get_data(as_text=True)
    page = frank.get(group_url).get_data(as_text=True)
    assert 'id="member-carol"' in page and 'id="member-dave"' in page and "2 members" in page
    searched = frank.get(f"{group_url}?q=dav").get_data(as_text=True)
    assert 'id="member-dave"' in searched and 'id="member-carol"' not in searched
    dave_id = people["dave"].id
    removed = post_form(frank, f"{group_url}/members/{dave_id}/remove", {}, token_from=group_url)
    assert removed.status_code == 302 and 'id="member-dave"' not in frank.get(group_url).get_data(as_text=True)
    edits = {"name": "ml-team", "display_name": "", "avatar_url": "/icon/x.svg"}
    renamed = post_form(frank, f"{group_url}/edit", edits, token_from=group_url)
    assert renamed.status_code == 302
    listed = frank.get("/groups?q=team").get_data(as_text=True)
    assert 'id="group-ml-team"' in listed and 'id="group-Everyone"' not in listed
    # The Users page (owners) shows each person's groups.
    users_page = signed_in(app, "alice").get("/users").get_data(as_text=True)
    carol_row = re.search(r'<tr id="user-' + people["carol"].id + r'".*?</tr>', users_page, re.S)
    assert carol_row is not None and "ml-team" in carol_row.group(0)
    # A member sees the groups they are in, with no forms.
    carol = signed_in(app, "carol")
    assert 'id="group-ml-team"' in carol.get("/groups").get_data(as_text=True)
    member_view = carol.get(group_url).get_data(as_text=True)
    assert "add-member-form" not in member_view and "delete-group-form" not in member_view
    assert signed_in(app, "dave").get(group_url).status_code == 404
    deleted = post_form(frank, f"{group_url}/delete", {}, token_from=group_url)
    assert deleted.status_code == 302 and frank.get(group_url).status_code == 404


def test_the_permissions_tab_grants_and_the_template_page_says_who_may_use_it(
    app: Flask, client: FlaskClient, people: dict[str, Persona]
) -> None:
    daemon = FakeDaemon(client)
    gpu_id = import_template(client, people, daemon, name="gpu")["id"]
    group = client.post("/api/v2/organizations/default/groups", json={"name": "ml"}, headers=people["alice"].auth)
    client.patch(f"/api/v2/groups/{group.json['id']}", json={"add_users": [people["dave"].id]},
                 headers=people["alice"].auth)  # fmt: skip
    bob = signed_in(app, "bob")
    tab = "/templates/gpu/permissions"
    page = bob.get(tab).get_data(as_text=True)
    assert 'id="acl-group-Everyone"' in page and '<option value="carol">' in page
    everyone = group.json["organization_id"]
    assert post_form(bob, f"{tab}/remove", {"group_id": everyone}, token_from=tab).status_code == 302
    assert post_form(bob, tab, {"group_id": group.json["id"], "role": "use"}).status_code == 302
    assert post_form(bob, tab, {"username": "erin", "role": "admin"}).status_code == 302
    wrong = post_form(bob, tab, {"username": "nobody", "role": "use"})
    assert wrong.status_code == 400 and "No person named" in wrong.get_data(as_text=True)
    wrong_role = post_form(bob, tab, {"username": "carol", "role": "owner"})
    assert wrong_role.status_code == 400
    page = bob.get(tab).get_data(as_text=True)
    assert 'id="acl-group-ml"' in page and 'id="acl-user-erin"' in page and 'id="acl-group-Everyone"' not in page
    # Carol no longer sees it; dave sees who may use it but no admin tabs; erin has them.
    assert signed_in(app, "carol").get("/templates/gpu").status_code == 404
    dave_page = signed_in(app, "dave").get("/templates/gpu").get_data(as_text=True)
    access_card = re.search(r'<section class="card" id="template-access">.*?</section>', dave_page, re.S)
    assert access_card is not None and "ml" in access_card.group(0) and "erin" in access_card.group(0)
    assert 'id="tab-permissions"' not in dave_page and 'id="template-settings"' not in dave_page
    erin_page = signed_in(app, "erin").get("/templates/gpu").get_data(as_text=True)
    assert 'id="tab-permissions"' in erin_page and 'id="template-settings"' in erin_page
    # Erin looks after gpu's workspaces' builds: she may stop dave's, not delete it (nor get into it).
    body = {"template_id": gpu_id, "name": "ws", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    workspace = client.post("/api/v2/workspaces", json=body, headers=people["dave"].auth).json
    job_id = workspace["latest_build"]["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    assert daemon.call(f"/jobs/{job_id}/complete", {"workspace_build": {"resources": []}}).status_code == 204
    erin_view = signed_in(app, "erin").get(f"/workspaces/{workspace['id']}").get_data(as_text=True)
    assert 'name="transition" value="stop"' in erin_view and f"/workspaces/{workspace['id']}/delete" not in erin_view
    assert signed_in(app, "carol").get(f"/workspaces/{workspace['id']}").status_code == 404
    listed = signed_in(app, "erin").get("/workspaces").get_data(as_text=True)
    assert "<th>Owner</th>" in listed and "<td>dave</td>" in listed
    assert "<th>Owner</th>" not in signed_in(app, "dave").get("/workspaces").get_data(as_text=True)
    assert csrf_token(signed_in(app, "erin"), tab)
