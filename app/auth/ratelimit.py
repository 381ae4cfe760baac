"""Failed sign-ins are counted in Redis, so every web replica enforces the same limit."""

from __future__ import annotations

from app.auth.access import record_failed_sign_in
from app.core.config import Settings
from app.core.errors import Forbidden, InvalidInput, RateLimited, Unauthorized
from app.core.redis_client import get_redis
from app.core.validation import text_problem
from app.users.models import User
from app.users.services import authenticate, find_by_login

# One address may front many people (an office NAT), so it gets more room than a single email address.
ADDRESS_ALLOWANCE = 5


def _keys(address: str, email: str) -> list[tuple[str, int]]:
    """(Redis key, multiple of the limit) for the email and for the client address."""
    return [
        (f"slipway:login-failures:email:{email.strip().lower()}", 1),
        (f"slipway:login-failures:ip:{address}", ADDRESS_ALLOWANCE),
    ]


def check_login_allowed(settings: Settings, address: str, email: str) -> None:
    client = get_redis()
    keys = _keys(address, email)
    counts = client.mget([key for key, _ in keys])
    for (key, multiplier), count in zip(keys, counts, strict=True):
        if count is not None and int(count) >= settings.login_failure_limit * multiplier:
            retry = max(int(client.ttl(key)), 1)
            raise RateLimited(f"Too many failed sign-in attempts. Try again in {retry} seconds.")


def record_login_failure(settings: Settings, address: str, email: str) -> None:
    pipe = get_redis().pipeline()
    for key, _ in _keys(address, email):
        # The window starts at the first failure (SET NX); EXPIRE NX would need Redis 7, the embedded one is 6.2.
        pipe.set(key, 0, ex=settings.login_failure_window, nx=True)
        pipe.incr(key)
    pipe.execute()


def clear_login_failures(address: str, email: str) -> None:
    get_redis().delete(_keys(address, email)[0][0])


def sign_in_with_password(settings: Settings, address: str, email: str, password: str) -> User:
    """The user for a password sign-in (``email`` may be a username), counting failures per account and address;
    429 once past the limit."""
    if settings.disable_password_auth:
        raise Forbidden(f"Password sign-in is disabled on this server: sign in with {settings.oidc_sign_in_text}.")
    if problem := text_problem(email):  # no account is named so, and neither the log nor PostgreSQL could keep it
        raise InvalidInput(f"Username or email: {problem}")
    # One count per account, whether it is named by its username or its email (else each would get the limit).
    account = find_by_login(email)
    counted = account.email if account is not None else email
    check_login_allowed(settings, address, counted)
    try:
        user = authenticate(email, password)
    except Unauthorized as refused:
        record_login_failure(settings, address, counted)
        record_failed_sign_in(email, "password", refused.status, refused.message)
        raise
    clear_login_failures(address, counted)
    return user


# "Forgot password" requests: few per email (each sends a message to someone's inbox), more per address.
RESET_REQUESTS_PER_EMAIL = 3
RESET_REQUESTS_PER_ADDRESS = 10
RESET_WINDOW_SECONDS = 3600


def count_reset_request(address: str, email: str) -> None:
    """Count one "forgot password" request, whether or not the email has an account; 429 once past the limit
    (the same for every email, so the limit says nothing about which ones exist)."""
    client = get_redis()
    limits = [
        (f"slipway:password-resets:email:{email.strip().lower()}", RESET_REQUESTS_PER_EMAIL),
        (f"slipway:password-resets:ip:{address}", RESET_REQUESTS_PER_ADDRESS),
    ]
    pipe = client.pipeline()
    for key, _ in limits:
        pipe.set(key, 0, ex=RESET_WINDOW_SECONDS, nx=True)
        pipe.incr(key)
    counts = pipe.execute()[1::2]
    for (key, limit), count in zip(limits, counts, strict=True):
        if int(count) > limit:
            retry = max(int(client.ttl(key)), 1)
            raise RateLimited(f"Too many password reset requests. Try again in {retry // 60 + 1} minutes.")
