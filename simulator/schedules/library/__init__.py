"""Built-in schedules, one module each; every module here is imported by the registry."""
