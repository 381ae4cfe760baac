"""One Redis client (and connection pool) per web process."""

from __future__ import annotations

import redis
from flask import Flask, current_app

EXTENSION_KEY = "slipway_redis"


def init_app(app: Flask) -> None:
    # redis-py 8 caps a pool at 100 connections by default; live-log streams must not hit that ceiling.
    app.extensions[EXTENSION_KEY] = redis.Redis.from_url(
        app.config["SLIPWAY_SETTINGS"].redis_url,
        max_connections=10_000,
        socket_timeout=10,
        socket_connect_timeout=5,
    )


def get_redis() -> redis.Redis:
    client: redis.Redis = current_app.extensions[EXTENSION_KEY]
    return client
