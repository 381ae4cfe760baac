"""Git providers (external auth): people link their GitHub, GitLab … accounts once; builds and workspaces get
fresh tokens from here (API.md "Git providers (external auth)")."""
