"""``python -m agent``: exit code 2 for bad configuration, 0 after a clean shutdown."""

from agent.main import main

main()
