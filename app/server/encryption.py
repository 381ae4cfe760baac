"""`slipway server encryption status | rotate`: what the database's secrets are encrypted with, and moving them
all onto the first configured key (README "Secrets in the database")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy.exc import SQLAlchemyError

from app.core.config import Settings, ensure_secret_key
from app.core.crypto import EncryptionKeyMissing, UndecryptableValue, current_keyring
from app.core.encryption_keys import EncryptionStatus, KeyProblem, check_keys, encryption_status, rotate
from app.core.extensions import db
from app.server.supervisor import StartupError

Echo = Callable[[str], None]


@contextmanager
def _database(settings: Settings) -> Iterator[None]:
    """An app context on the server's database, which must be migrated already (the server does it at start).
    Every failure becomes one line for the operator; an interrupted batch is rolled back."""
    from app.factory import create_app

    if not settings.secret_key and not (settings.data_dir / "secret_key").is_file():
        # ensure_secret_key would make a new one, whose derived key reads nothing: a mistyped --data-dir, surely.
        raise StartupError(f"{settings.data_dir} holds no secret_key: give the server's --data-dir or --secret-key")
    app = create_app(ensure_secret_key(settings))
    with app.app_context():
        try:
            yield
        except SQLAlchemyError as exc:
            reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise StartupError(f"database error: {reason} (has `slipway server` migrated this database?)") from exc
        except (EncryptionKeyMissing, UndecryptableValue) as exc:
            raise StartupError(exc.message) from exc
        except KeyProblem as exc:
            raise StartupError(str(exc)) from exc
        finally:
            db.session.remove()
            db.engine.dispose()


def print_status(settings: Settings, echo: Echo) -> None:
    with _database(settings):
        _echo_status(encryption_status(current_keyring()), echo)


def run_rotation(settings: Settings, echo: Echo, batch_size: int) -> None:
    with _database(settings):
        keyring = current_keyring()
        check_keys(keyring)
        echo(f"Re-encrypting every secret with key {keyring.active.label}.")

        def progress(column: str, done: int, total: int) -> None:
            echo(f"  {column}: {done}/{total}")

        result = rotate(keyring, batch_size=batch_size, progress=progress)
        echo(f"Re-encrypted {result.reencrypted} values.")
        if result.remaining:
            echo(
                f"{result.remaining} values are still on other keys (written meanwhile by a server that encrypts "
                "with another key?): restart every replica with the new key first, then run rotate again."
            )
        elif result.revoked:
            echo(
                f"Revoked {', '.join(result.revoked)}: nothing is encrypted with "
                f"{'it' if len(result.revoked) == 1 else 'them'} any more; remove "
                f"{'it' if len(result.revoked) == 1 else 'them'} from --encryption-keys."
            )
        else:
            echo("No other key holds data.")


def _echo_status(status: EncryptionStatus, echo: Echo) -> None:
    echo("Keys:")
    for key in status.keys:
        role = "encrypts" if key.active else ("decrypts" if key.configured else "NOT CONFIGURED")
        recorded = ""
        if key.revoked_at is not None:
            recorded = f", revoked {key.revoked_at:%Y-%m-%d %H:%M} UTC"
        elif key.created_at is not None:
            recorded = f", first used {key.created_at:%Y-%m-%d %H:%M} UTC"
        derived = " (derived from the secret key)" if key.derived else ""
        echo(f"  {key.key_id}{derived}: {role}, {status.values_on(key.key_id)} values{recorded}")
    echo("Encrypted values:")
    for column, counts in status.values.items():
        detail = ", ".join(f"{key_id}: {count}" for key_id, count in sorted(counts.items())) or "none"
        echo(f"  {column}: {detail}")
