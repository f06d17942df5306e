"""The store commands (dump, verify, stat, get, clean) and their helpers: read-only views of a store,
safe beside a running writer. Imports the rest of store; nothing imports tools but the command line.
"""

from store.tools.cli import add_commands

__all__ = ["add_commands"]
