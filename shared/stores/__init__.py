"""Every module that reads or writes Redis for one kind of record."""
