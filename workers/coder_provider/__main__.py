"""`python -m workers.coder_provider`: the plugin process Terraform starts (through the mirror's launcher)."""

from workers.coder_provider import main

if __name__ == "__main__":
    main()
