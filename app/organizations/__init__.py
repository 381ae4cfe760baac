"""Organisations: who owns users, groups, templates, provisioner daemons and keys.

This package sits below ``app.users`` (it imports only ``app.core``) so that creating a user can make them a
member of the default organisation without an import running back up the layers.
"""
