"""Managing accounts on the web: the Users page and API (owners), and each person's Account page and tokens."""
