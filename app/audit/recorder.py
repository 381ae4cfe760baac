"""Who changed what: a session hook turns every flush of a registered model into audit entries, in the flush's own
transaction, so no write path (a form, the API, the CLI, a job) can change an audited row without its entry.
Bulk ORM statements (``update(Model)``, ``delete(Model)``, ``insert(Model)`` with rows) are audited the same way,
by reading the rows they touch before and after. Sign-ins, sign-outs and daemon registrations change no audited
row: their callers record them explicitly with :func:`record`.

Nothing here knows the features: each registers its models (app/auditing/registry.py) with the fields that are
secret (their values are never written, only that they changed) and the bookkeeping fields that are no change."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from flask import g, has_request_context, request
from sqlalchemy import event, inspect, select, tuple_
from sqlalchemy.orm import Mapper, ORMExecuteState, Session, SessionTransaction
from sqlalchemy.orm.state import InstanceState

from app.audit.chain import Diff, PendingEntry, append
from app.core.columns import rfc3339
from app.core.encrypted_columns import EncryptedColumn
from app.core.extensions import db

ACTION_CREATE, ACTION_WRITE, ACTION_DELETE = "create", "write", "delete"
ACTION_LOGIN, ACTION_LOGOUT, ACTION_REGISTER = "login", "logout", "register"
# A column whose name says it holds a credential is secret even if its model forgot to say so.
SECRET_NAME_PARTS = ("secret", "password", "token", "hash", "private_key", "psk")
ACTOR_USER, ACTOR_SYSTEM, ACTOR_DAEMON, ACTOR_ANONYMOUS = "user", "system", "daemon", "anonymous"


@dataclass(frozen=True)
class AuditSpec:
    """How one model is audited."""

    resource_type: str
    # The attribute that names the resource in the log (a template's name, a user's username).
    name_field: str | None = None
    secret_fields: frozenset[str] = frozenset()
    # Bookkeeping that changes without anyone changing the resource (last used, heartbeats).
    ignored_fields: frozenset[str] = frozenset()
    # A verb of its own for a create (a build's transition: start, stop, delete), from the row's values.
    create_action: Callable[[Mapping[str, Any]], str] | None = None
    build_reason_field: str | None = None


@dataclass(frozen=True)
class Actor:
    kind: str
    user_id: str | None
    username: str


SYSTEM = Actor(ACTOR_SYSTEM, None, "system")
_REGISTRY: dict[type, AuditSpec] = {}
_NOT_AUDITED: dict[type, str] = {}
_acting_as: ContextVar[Actor | None] = ContextVar("slipway_audit_actor", default=None)


def register(model: type, spec: AuditSpec) -> None:
    _REGISTRY[model] = spec


def exempt(model: type, reason: str) -> None:
    """Say on purpose that a model is not audited, and why (a test insists every model is one or the other)."""
    _NOT_AUDITED[model] = reason


def registry() -> Mapping[type, AuditSpec]:
    return dict(_REGISTRY)


def exemptions() -> Mapping[type, str]:
    return dict(_NOT_AUDITED)


def init_app() -> None:
    """Listen on every ORM session (flask-sqlalchemy's, and any a script opens)."""
    if not event.contains(Session, "after_flush", _after_flush):
        event.listen(Session, "after_flush", _after_flush)
        event.listen(Session, "do_orm_execute", _on_orm_execute)
        event.listen(Session, "before_commit", _before_commit)
        event.listen(Session, "after_transaction_create", _mark_savepoint)
        event.listen(Session, "after_soft_rollback", _forget)
        event.listen(Session, "after_transaction_end", _end)


@contextmanager
def acting_as(actor: Actor) -> Iterator[None]:
    """Attribute what the block changes to ``actor`` (the lifecycle executor, a maintenance task)."""
    token = _acting_as.set(actor)
    try:
        yield
    finally:
        _acting_as.reset(token)


def current_actor() -> Actor:
    chosen = _acting_as.get()
    if chosen is not None:
        return chosen
    if not has_request_context():
        return SYSTEM
    credential = request.environ.get("slipway.daemon_credential")
    if credential is not None:
        return _daemon_actor(credential)
    for user in (g.get("api_user"), g.get("_login_user")):
        if user is not None and getattr(user, "is_authenticated", False):
            return Actor(ACTOR_USER, str(user.id), str(user.username))
    return Actor(ACTOR_ANONYMOUS, None, "")


def user_actor(user: Any) -> Actor:
    return Actor(ACTOR_USER, str(user.id), str(user.username))


def _daemon_actor(credential: Any) -> Actor:
    """A daemon acts as the person whose token it holds, else as its key or PSK (never the secret itself)."""
    if credential.user is not None:
        return user_actor(credential.user)
    if credential.key is not None:
        return Actor(ACTOR_DAEMON, None, f"provisioner-key:{credential.key.name}")
    return Actor(ACTOR_DAEMON, None, "builtin-daemon" if credential.kind == "builtin" else "provisioner-psk")


def _origin() -> tuple[str, str]:
    if not has_request_context():
        return "", ""
    return request.remote_addr or "", request.user_agent.string


def pending(
    resource_type: str, resource_id: str, resource_name: str, action: str, diff: Diff | None = None, *,
    actor: Actor | None = None, status_code: int = 200, build_reason: str | None = None,
) -> PendingEntry:  # fmt: skip
    who = actor or current_actor()
    ip, user_agent = _origin()
    return PendingEntry(
        actor_kind=who.kind, user_id=who.user_id, username=who.username, ip=ip, user_agent=user_agent,
        resource_type=resource_type, resource_id=resource_id, resource_name=resource_name, action=action,
        diff=diff or {}, build_reason=build_reason, status_code=status_code,
    )  # fmt: skip


def record(
    resource_type: str, resource_id: str, resource_name: str, action: str, diff: Diff | None = None, *,
    actor: Actor | None = None, status_code: int = 200,
) -> None:  # fmt: skip
    """Record an event that changes no audited row (a sign-in, a sign-out, a registration) in the current
    transaction; the caller commits it with whatever else it does."""
    entry = pending(resource_type, resource_id, resource_name, action, diff, actor=actor, status_code=status_code)
    _queue(db.session(), [entry])


# A transaction's entries wait in its session until commit, then go into the chain at once: one lock of the chain
# head and one INSERT per transaction however many flushes it made (and the lock is held the shortest time).
PENDING_KEY = "slipway_audit_pending"
SAVEPOINTS_KEY = "slipway_audit_savepoints"


def _queue(session: Session, entries: Sequence[PendingEntry]) -> None:
    if entries:
        session.info.setdefault(PENDING_KEY, []).extend(entries)


def _before_commit(session: Session) -> None:
    """Flush what is left first (a commit flushes only after this hook), then chain everything in this transaction:
    the entries commit with the change, or neither does."""
    session.flush()
    entries = session.info.pop(PENDING_KEY, None)
    if entries:
        append(session.connection(), entries)


def _mark_savepoint(session: Session, transaction: SessionTransaction) -> None:
    if transaction.nested:
        session.info.setdefault(SAVEPOINTS_KEY, {})[id(transaction)] = len(session.info.get(PENDING_KEY, []))


def _forget(session: Session, previous_transaction: SessionTransaction) -> None:
    """A rollback drops the entries of what it undid: a savepoint's since it began, else all."""
    marks = session.info.get(SAVEPOINTS_KEY, {})
    if previous_transaction.nested and id(previous_transaction) in marks:
        del session.info.setdefault(PENDING_KEY, [])[marks.pop(id(previous_transaction)) :]
    elif not previous_transaction.nested:
        session.info.pop(PENDING_KEY, None)
        session.info.pop(SAVEPOINTS_KEY, None)


def _end(session: Session, transaction: SessionTransaction) -> None:
    """However the outermost transaction ended (committed, rolled back, closed), nothing of it waits any more."""
    if transaction.parent is None:
        session.info.pop(PENDING_KEY, None)
        session.info.pop(SAVEPOINTS_KEY, None)


def plain(value: object) -> object:
    """A column's value as JSON the log can keep."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    to_json = getattr(value, "to_json", None)
    return plain(to_json()) if callable(to_json) else str(value)


def is_secret(mapper: Mapper[Any], spec: AuditSpec, key: str) -> bool:
    column = mapper.columns[key] if key in mapper.columns else None
    if column is not None and isinstance(column.type, EncryptedColumn):
        return True
    return key in spec.secret_fields or any(part in key for part in SECRET_NAME_PARTS)


def _change(mapper: Mapper[Any], spec: AuditSpec, key: str, old: object, new: object) -> dict[str, Any]:
    if is_secret(mapper, spec, key):
        return {"old": None, "new": None, "secret": True}
    return {"old": plain(old), "new": plain(new), "secret": False}


@dataclass
class _Change:
    mapper: Mapper[Any]
    spec: AuditSpec
    values: Mapping[str, Any]  # what identifies and names it (its current or last values)
    diff: Diff = field(default_factory=dict)


def _entry(found: _Change, action: str) -> PendingEntry:
    spec, values = found.spec, found.values
    resource_id = "/".join(str(values.get(str(column.key))) for column in found.mapper.primary_key)
    name = str(values.get(spec.name_field) or "") if spec.name_field is not None else ""
    build_reason = None
    if action == ACTION_CREATE and spec.create_action is not None:
        action = spec.create_action(values)
        build_reason = str(values.get(spec.build_reason_field)) if spec.build_reason_field is not None else None
    return pending(spec.resource_type, resource_id, name, action, found.diff, build_reason=build_reason)


def _keys(mapper: Mapper[Any], spec: AuditSpec) -> list[str]:
    return [attr.key for attr in mapper.column_attrs if attr.key not in spec.ignored_fields]


def _created(mapper: Mapper[Any], spec: AuditSpec, values: Mapping[str, Any]) -> PendingEntry:
    diff = {key: _change(mapper, spec, key, None, values[key]) for key in _keys(mapper, spec) if key in values}
    return _entry(
        _Change(mapper, spec, values, {k: v for k, v in diff.items() if v["new"] is not None or v["secret"]}),
        ACTION_CREATE,
    )


def _deleted(mapper: Mapper[Any], spec: AuditSpec, values: Mapping[str, Any]) -> PendingEntry:
    diff = {key: _change(mapper, spec, key, values[key], None) for key in _keys(mapper, spec) if key in values}
    return _entry(_Change(mapper, spec, values, diff), ACTION_DELETE)


def _updated(
    mapper: Mapper[Any], spec: AuditSpec, before: Mapping[str, Any], after: Mapping[str, Any]
) -> PendingEntry | None:
    diff = {
        key: _change(mapper, spec, key, before.get(key), after.get(key))
        for key in _keys(mapper, spec)
        if key in after and before.get(key) != after.get(key)
    }
    return _entry(_Change(mapper, spec, after, diff), ACTION_WRITE) if diff else None


def _dirty_entry(state: InstanceState[Any], spec: AuditSpec) -> PendingEntry | None:
    """An updated object's entry from the history of the attributes this flush changed (still the flush's at
    after_flush): only those are read and compared, not every column of the row (a settings form changes one or two
    of a template's thirty)."""
    mapper = state.mapper
    changed = state.committed_state
    diff = {}
    for key in _keys(mapper, spec):
        if key not in changed:
            continue
        history = state.attrs[key].history
        if not (history.added or history.deleted):
            continue
        old = history.deleted[0] if history.deleted else None
        new = history.added[0] if history.added else None
        if old != new:
            diff[key] = _change(mapper, spec, key, old, new)
    return _entry(_Change(mapper, spec, state.dict, diff), ACTION_WRITE) if diff else None


def _after_flush(session: Session, flush_context: object) -> None:
    entries: list[PendingEntry] = []
    for obj in session.new:
        state = inspect(obj)
        spec = _REGISTRY.get(state.mapper.class_)
        if spec is not None:
            entries.append(_created(state.mapper, spec, dict(state.dict)))
    for obj in session.dirty:
        state = inspect(obj)
        spec = _REGISTRY.get(state.mapper.class_)
        if spec is not None and state.modified and (entry := _dirty_entry(state, spec)) is not None:
            entries.append(entry)
    for obj in session.deleted:
        state = inspect(obj)
        spec = _REGISTRY.get(state.mapper.class_)
        if spec is not None:
            entries.append(_deleted(state.mapper, spec, dict(state.dict)))
    _queue(session, entries)


def _rows_of(session: Session, mapper: Mapper[Any], criteria: Any) -> dict[tuple[object, ...], dict[str, Any]]:
    attrs = list(mapper.column_attrs)
    query = select(*(attr.columns[0] for attr in attrs))
    rows = session.execute(query if criteria is None else query.where(criteria)).all()
    found = {}
    for row in rows:
        values = {attr.key: value for attr, value in zip(attrs, row, strict=True)}
        found[_key_of(mapper, values)] = values
    return found


def _key_of(mapper: Mapper[Any], values: Mapping[str, Any]) -> tuple[object, ...]:
    return tuple(values[str(column.key)] for column in mapper.primary_key)


def _by_primary_key(mapper: Mapper[Any], keys: Sequence[tuple[object, ...]]) -> Any:
    columns = list(mapper.primary_key)
    if len(columns) == 1:
        return columns[0].in_([key[0] for key in keys])
    return tuple_(*columns).in_(keys)


def _parameter_rows(state: ORMExecuteState) -> list[Mapping[str, Any]]:
    parameters: Any = state.parameters
    if isinstance(parameters, list):
        return parameters
    return [dict(parameters or {})]


def _on_orm_execute(state: ORMExecuteState) -> Any:
    """Audit an ORM bulk statement on a registered model: the rows it touches, read before and after it."""
    if not (state.is_update or state.is_delete or state.is_insert):
        return None
    mapper = state.bind_mapper
    spec = _REGISTRY.get(mapper.class_) if mapper is not None else None
    if mapper is None or spec is None:
        return None
    session = state.session
    rows = _parameter_rows(state)
    if state.is_insert:
        result = state.invoke_statement()
        _queue(session, [_created(mapper, spec, row) for row in rows])
        return result
    if isinstance(state.parameters, list):  # an UPDATE by primary key, one parameter set per row
        before = _rows_of(session, mapper, _by_primary_key(mapper, [_key_of(mapper, row) for row in rows]))
    else:
        before = _rows_of(session, mapper, getattr(state.statement, "whereclause", None))
    result = state.invoke_statement()
    entries: list[PendingEntry] = []
    if state.is_delete:
        entries = [_deleted(mapper, spec, values) for values in before.values()]
    elif before:
        after = _rows_of(session, mapper, _by_primary_key(mapper, list(before)))
        entries = [e for key, values in before.items() if (e := _updated(mapper, spec, values, after.get(key, {})))]
    _queue(session, entries)
    return result


def change(new: object, old: object = None) -> dict[str, Any]:
    """One field of an explicitly recorded diff (never a secret: callers record names, kinds and tags)."""
    return {"old": plain(old), "new": plain(new), "secret": False}
