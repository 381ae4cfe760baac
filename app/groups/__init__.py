"""Groups of people within an organisation, and the built-in Everyone group."""
