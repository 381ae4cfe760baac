"""Which app a path names, and who may open it (``coder_app.share``: owner, authenticated, public)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from flask import current_app
from sqlalchemy import func, select

from app.agents.hosts import AppHost, Wildcard, app_url
from app.agents.port_sharing import port_share_level
from app.core.errors import Forbidden, NotFound
from app.core.extensions import db
from app.resources.models import WorkspaceAgent, WorkspaceResource
from app.users.models import User
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.services import can_read, can_use, latest_build
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


def wildcard() -> Wildcard | None:
    """The deployment's wildcard access URL, if it has one."""
    settings = current_app.config["SLIPWAY_SETTINGS"]
    return Wildcard.parse(settings.wildcard_access_url, settings.access_url)


NO_WILDCARD = "it is a subdomain app and this server has no wildcard access URL (--wildcard-access-url)"


def subdomain_url(owner: str, workspace: str, agent: str, slug: str, *, tls: bool = False) -> str | None:
    """Where a subdomain app (or a port: ``tls`` for one that speaks HTTPS, Coder's ``{port}s--…``) opens; None
    without a wildcard access URL."""
    pattern = wildcard()
    host = (
        AppHost(owner, workspace, agent, slug=slug)
        if not slug.isdecimal()
        else AppHost(owner, workspace, agent, port=int(slug), tls=tls)
    )
    return app_url(pattern, host) if pattern is not None else None


def app_for(viewer: User | None, owner_name: str, workspace_and_agent: str, slug: str) -> AppTarget:
    """The app at /@owner/workspace[.agent]/apps/slug/, if ``viewer`` may open it.

    Whoever may not see the workspace learns nothing from the answer: an anonymous caller is sent to sign in
    (:class:`Forbidden`) and anyone else gets one :class:`NotFound`, whether the workspace exists or not. Those who
    may see it (its owner, admins) are told what is missing."""
    workspace_name, _, agent_name = workspace_and_agent.partition(".")
    return _checked(viewer, owner_name, workspace_name, agent_name, slug, on_subdomain=False)


def app_for_host(viewer: User | None, host: AppHost) -> AppTarget:
    """The app (or port) an app host names, if ``viewer`` may open it; the same answers as :func:`app_for`."""
    slug = host.slug or str(host.port)
    return _checked(viewer, host.owner, host.workspace, host.agent, slug, on_subdomain=True, tls=host.tls)


def _checked(
    viewer: User | None,
    owner_name: str,
    workspace_name: str,
    agent_name: str,
    slug: str,
    *,
    on_subdomain: bool,
    tls: bool = False,
) -> AppTarget:
    workspace = find_workspace(owner_name, workspace_name)
    try:
        if workspace is None:
            raise NotFound(f"No workspace {owner_name}/{workspace_name}.")
        target = find_app(workspace, agent_name, slug, on_subdomain=on_subdomain, tls=tls)
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
    # Its latest build comes in the same query: every caller reads it next, and it is then in the session's
    # identity map (latest_build() finds it there without a query of its own; this runs on every app request).
    row = db.session.execute(
        select(Workspace, WorkspaceBuild)
        .join(User, User.id == Workspace.owner_id)
        .outerjoin(WorkspaceBuild, WorkspaceBuild.id == Workspace.latest_build_id)
        .where(
            func.lower(User.username) == owner_name.lower(),
            Workspace.name_key == workspace_name.lower(),
            Workspace.deleted.is_(False),
        )
    ).first()
    return row[0] if row is not None else None


def build_agents(build: WorkspaceBuild) -> list[WorkspaceAgent]:
    """The agents of ``build`` in one query: the proxy needs neither their resources nor their log sources, which
    job_resources() loads as well (three queries and the log sources' rows on every app request)."""
    return list(
        db.session.scalars(
            select(WorkspaceAgent)
            .join(WorkspaceResource, WorkspaceResource.id == WorkspaceAgent.resource_id)
            .where(WorkspaceResource.job_id == build.job_id)
            .order_by(WorkspaceResource.type, WorkspaceResource.name, WorkspaceAgent.name)
        )
    )


def find_app(
    workspace: Workspace, agent_name: str, slug: str, *, on_subdomain: bool = False, tls: bool = False
) -> AppTarget:
    """The app named ``slug`` of the workspace's current build (of its agent ``agent_name``, if named), or the
    port ``slug`` names when no app has that slug, or NotFound saying what is missing.

    A subdomain app is never served on the dashboard's origin (``on_subdomain`` false): it asked for an origin of
    its own."""
    build = latest_build(workspace)
    agents = build_agents(build)
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
    if app is None and slug.isdecimal() and 1 <= int(slug) <= 65535:
        return port_target(workspace, build, agent, int(slug), tls=tls)
    if app is not None and app.subdomain and not on_subdomain:
        where = subdomain_url(workspace.owner.username, workspace.name, agent.name, app.slug)
        reason = f"open it at {where}" if where else NO_WILDCARD
        raise NotFound(f"App {app.name} is not served on this path: {reason}.")
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


def port_target(
    workspace: Workspace, build: WorkspaceBuild, agent: WorkspaceAgent, port: int, *, tls: bool
) -> AppTarget:
    """A listening port of the agent, opened like an app at its sharing level."""
    scheme = "https" if tls else "http"
    share = port_share_level(workspace.id, agent.name, port)
    app = App(slug=str(port), display_name=f"port {port}", url=f"{scheme}://127.0.0.1:{port}", share=share)
    return AppTarget(workspace, build, agent, app, scheme, "127.0.0.1", port, "")


def check_app_access(target: AppTarget, viewer: User | None) -> None:
    """``owner``: whoever may use the workspace (its owner, deployment owners, those it is shared with: the rule of
    every way in); ``authenticated``: anyone signed in;
    ``public``: anyone. A viewer who may not see the workspace at all learns nothing of it (404)."""
    if target.share == "public":
        return
    if viewer is None:
        raise Forbidden("Sign in to open this app.")
    if target.share == "authenticated":
        return
    if not can_use(viewer, target.workspace):
        raise NotFound(f"No app {target.slug!r} you may open here.")


def sandboxed_for(target: AppTarget, viewer: User | None, *, owner_same_origin: bool) -> bool:
    """Whether the app's pages run in the proxy's sandbox for ``viewer``: always, unless the deployment lets
    workspace owners open their own path apps on the dashboard's origin and ``viewer`` is this workspace's owner
    (nobody else: not a deployment owner, not whoever the app is shared with)."""
    return not (owner_same_origin and viewer is not None and viewer.id == target.workspace.owner_id)
