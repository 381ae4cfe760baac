"""`python -m app.server.notifier`: the notification worker `slipway server` runs next to the web server.

An RQ worker on the notifications queue, inside the server's application (it reads and updates the outbox in the
database: it is server code, unlike the provisioner daemons). It does not fork per job: sending a mail needs no
isolation, and the database pool survives between jobs.
"""

from __future__ import annotations

import logging
import os
import time

from redis.exceptions import ConnectionError as RedisConnectionError
from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer

from app.core.config import load_settings
from app.core.redis_client import get_redis
from app.factory import create_app
from app.notifications.delivery import QUEUE

log = logging.getLogger("slipway.notifications")
RECONNECT_SECONDS = 5


def main() -> None:
    app = create_app(load_settings(os.environ), migrations=False)
    with app.app_context():
        connection = get_redis()
        queue = Queue(QUEUE, connection=connection, serializer=JSONSerializer)
        while True:
            try:
                # Made here, not before the loop: it names itself to Redis at once, and Redis may be away already.
                worker = SimpleWorker([queue], connection=connection, serializer=JSONSerializer)
                worker.work(with_scheduler=False, logging_level="WARNING")
                return  # asked to stop (SIGTERM from `slipway server`)
            except RedisConnectionError:
                # Redis away, when this starts or later, must not stop the server (its supervisor stops when a child
                # dies): the outbox keeps every notification, and the maintenance loop enqueues them again once
                # Redis is back.
                log.warning("notification worker cannot reach Redis; trying again in %d s", RECONNECT_SECONDS)
                time.sleep(RECONNECT_SECONDS)


if __name__ == "__main__":
    main()
