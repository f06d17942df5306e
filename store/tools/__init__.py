"""The store commands (dump, verify, stat, get, clean) and their helpers: read-only views of a store,
safe beside a running writer. Imports the rest of store; nothing imports tools but the command line
and replay, which verifies what it wrote (verify_store).
"""

from store.tools.cli import add_commands, verify_store

__all__ = ["add_commands", "verify_store"]
