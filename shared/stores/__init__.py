"""Every module that talks to Redis."""
