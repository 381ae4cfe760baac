"""A workspace's life after create: schedules, activity, the lifecycle executor that acts on them (autostart,
autostop, auto-update, failure cleanup, dormancy, auto-delete)."""
