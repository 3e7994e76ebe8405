"""A run's tasks and their driver."""
