"""The store commands (dump, verify, stat, get, clean) and their helpers: read-only views of a store,
safe beside a running writer. Imports the rest of store; nothing imports tools but the command line
and replay, which verifies what it wrote (VerifyBehind while it writes, verify_store at the end).
"""

from store.tools.cli import add_commands, verify_store
from store.tools.verify_behind import VerifyBehind

__all__ = ["VerifyBehind", "add_commands", "verify_store"]
