"""People's secrets (Coder's user secrets): values a person stores once for their workspaces' builds."""
