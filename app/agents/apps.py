"""Which app a path names, and who may open it (``coder_app.share``: owner, authenticated, public)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from sqlalchemy import func, select

from app.core.errors import Forbidden, NotFound
from app.core.extensions import db
from app.resources.models import WorkspaceAgent
from app.resources.services import job_resources
from app.users.models import User
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.services import can_read, latest_build
from protocol.resources import App

SHARE_LEVELS = ("owner", "authenticated", "public")


@dataclass(frozen=True)
class AppTarget:
    workspace: Workspace
    build: WorkspaceBuild
    agent: WorkspaceAgent
    app: App
    scheme: str
    host: str
    port: int
    base_path: str

    @property
    def slug(self) -> str:
        return self.app.slug

    @property
    def name(self) -> str:
        return self.app.name

    @property
    def share(self) -> str:
        return self.app.share


def app_path(owner: str, workspace: str, agent: str, slug: str) -> str:
    """The app's address on the dashboard. Agent names and slugs come from the daemon: quoted, so that none can
    add a segment, a query or a fragment to the link."""
    owner, workspace, agent, slug = (quote(part, safe="") for part in (owner, workspace, agent, slug))
    return f"/@{owner}/{workspace}.{agent}/apps/{slug}/"


def app_for(viewer: User | None, owner_name: str, workspace_and_agent: str, slug: str) -> AppTarget:
    """The app at /@owner/workspace[.agent]/apps/slug/, if ``viewer`` may open it.

    Whoever may not see the workspace learns nothing from the answer: an anonymous caller is sent to sign in
    (:class:`Forbidden`) and anyone else gets one :class:`NotFound`, whether the workspace exists or not. Those who
    may see it (its owner, admins) are told what is missing."""
    workspace_name, _, agent_name = workspace_and_agent.partition(".")
    workspace = find_workspace(owner_name, workspace_name)
    try:
        if workspace is None:
            raise NotFound(f"No workspace {owner_name}/{workspace_name}.")
        target = find_app(workspace, agent_name, slug)
        check_app_access(target, viewer)
        return target
    except (NotFound, Forbidden):
        if workspace is not None and viewer is not None and can_read(viewer, workspace):
            raise
        if viewer is None:
            raise Forbidden("Sign in to open this app.") from None
        raise NotFound(f"There is no app {slug!r} here, or you may not open it.") from None


def find_workspace(owner_name: str, workspace_name: str) -> Workspace | None:
    """The workspace named so (case-insensitively) by its owner's username, whoever asks: callers check access."""
    workspace: Workspace | None = db.session.scalar(
        select(Workspace)
        .join(User, User.id == Workspace.owner_id)
        .where(
            func.lower(User.username) == owner_name.lower(),
            Workspace.name_key == workspace_name.lower(),
            Workspace.deleted.is_(False),
        )
    )
    return workspace


def find_app(workspace: Workspace, agent_name: str, slug: str) -> AppTarget:
    """The app named ``slug`` of the workspace's current build (of its agent ``agent_name``, if named), or
    NotFound saying what is missing."""
    build = latest_build(workspace)
    agents = [agent for resource in job_resources(build.job_id) for agent in resource.agents]
    if agent_name:
        agents = [agent for agent in agents if agent.name.lower() == agent_name.lower()]
    if not agents:
        named = f" named {agent_name}" if agent_name else ""
        raise NotFound(f"Workspace {workspace.name} has no running agent{named}.")
    if len(agents) > 1:
        names = ", ".join(sorted(agent.name for agent in agents))
        raise NotFound(
            f"Workspace {workspace.name} has several agents ({names}): name one, as {workspace.name}.<agent>."
        )
    agent = agents[0]
    app = agent.definition.app(slug)
    if app is None or not app.url or app.external:
        raise NotFound(f"Agent {agent.name} of {workspace.name} has no app {slug!r} to open here.")
    url = urlsplit(app.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise NotFound(f"App {slug!r} has a URL Slipway cannot proxy ({app.url}).")
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        raise NotFound(f"App {slug!r} has a URL Slipway cannot proxy ({app.url}).") from None
    return AppTarget(workspace, build, agent, app, url.scheme, url.hostname, port, url.path.rstrip("/"))


def check_app_access(target: AppTarget, viewer: User | None) -> None:
    """``owner``: the workspace's owner and deployment owners; ``authenticated``: anyone signed in;
    ``public``: anyone. A viewer who may not see the workspace at all learns nothing of it (404)."""
    if target.share == "public":
        return
    if viewer is None:
        raise Forbidden("Sign in to open this app.")
    if target.share == "authenticated":
        return
    if viewer.id != target.workspace.owner_id and not viewer.is_owner:
        raise NotFound(f"No app {target.slug!r} you may open here.")


def sandboxed_for(target: AppTarget, viewer: User | None, *, owner_same_origin: bool) -> bool:
    """Whether the app's pages run in the proxy's sandbox for ``viewer``: always, unless the deployment lets
    workspace owners open their own path apps on the dashboard's origin and ``viewer`` is this workspace's owner
    (nobody else: not a deployment owner, not whoever the app is shared with)."""
    return not (owner_same_origin and viewer is not None and viewer.id == target.workspace.owner_id)
