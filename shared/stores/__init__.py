"""Every module that reads or writes Redis."""
