"""Support for the people tests (tests/test_people.py, tests/test_browser_people.py): a mailbox one can wait on."""

from __future__ import annotations

import threading
from typing import Any

from tests.support.notifications import Mailbox


class WatchedMailbox(Mailbox):
    """The notification tests' mailbox, which a test can wait on (the sender may be another thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = threading.Condition()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        answer = await super().handle_DATA(server, session, envelope)
        with self.arrived:
            self.arrived.notify_all()
        return answer

    def wait_for(self, count: int) -> list[str]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.messages) >= count, timeout=30), self.messages
        return self.messages
