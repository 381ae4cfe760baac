"""What builds produce: a job's resources and their agents, as the server stores them and as the API shows them.

An import records the resources of its start and stop plans; a build records those of the state it left. Agents
are rows here because a build creates them; what a running agent reports (and how users reach it) is app/agents.
"""
