"""The audit log: who changed what, when and from where, in a hash chain that shows any edit made behind its back.

Below every feature (it imports none): features register their models (app/auditing/registry.py) and record the
events that change no row (sign-in, sign-out, registration) with :func:`app.audit.recorder.record`."""
