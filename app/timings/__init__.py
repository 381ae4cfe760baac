"""Build timings: when a build's (or a template import's) stages, resources, agent connection and scripts ran, as
Coder's ``WorkspaceBuildTimings`` and as a waterfall on the build page. Reads what provisioning and agents stored."""
