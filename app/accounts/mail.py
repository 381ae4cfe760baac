"""The emails of people management: an invitation, and a "forgot password" link. Sent through the notifications'
SMTP delivery (app/notifications/delivery.py), here rather than in app.users, which sits below notifications."""

from __future__ import annotations

import logging
import threading

from app.core.config import Settings
from app.core.errors import BadGateway
from app.notifications.delivery import DeliveryError, send_mail
from app.users.invitations import INVITATION_LIFETIME, revoke_invitation
from app.users.models import User, UserInvitation
from app.users.password_resets import RESET_LIFETIME

log = logging.getLogger("slipway.accounts")


def email_configured(settings: Settings) -> bool:
    return bool(settings.email_smarthost)


def send_invitation(settings: Settings, invitation: UserInvitation, inviter: User, link: str) -> None:
    """Send at once, so the person inviting learns whether it went: a failure withdraws the invitation (nobody
    holds its link) and is a 502 in words safe to show."""
    text = (
        f"{inviter.username} invited you to Slipway at {settings.access_url}.\n\n"
        f"Open this link to choose your username and password:\n{link}\n\n"
        f"It works once and expires in {INVITATION_LIFETIME.days} days.\n"
    )
    try:
        send_mail(settings, invitation.email, "You are invited to Slipway", text)
    except DeliveryError as exc:
        revoke_invitation(invitation.id)
        raise BadGateway(f"The invitation email could not be sent ({exc}). Nothing was saved: try again.") from None


def send_reset_in_background(settings: Settings, user: User, link: str) -> None:
    """Sent from a thread, so that the answer takes as long whether or not the email has an account."""
    minutes = int(RESET_LIFETIME.total_seconds() // 60)
    text = (
        f"Someone (hopefully you) asked to reset the password of {user.username} on Slipway.\n\n"
        f"Open this link to choose a new one:\n{link}\n\n"
        f"It works once and expires in {minutes} minutes. If you did not ask, ignore this email.\n"
    )
    threading.Thread(target=_send_quietly, args=(settings, user.email, text), daemon=True).start()


def _send_quietly(settings: Settings, to: str, text: str) -> None:
    try:
        send_mail(settings, to, "Reset your Slipway password", text)
    except DeliveryError as exc:
        log.warning("a password reset email could not be sent: %s", exc)
