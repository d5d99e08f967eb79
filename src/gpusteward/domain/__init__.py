"""Domain model, ports and errors: no I/O, imported by every other layer."""
