"""Prebuilt workspaces: pools of workspaces per template preset, built ahead and owned by the ``prebuilds`` system
user until a person claims one (issue 42)."""
