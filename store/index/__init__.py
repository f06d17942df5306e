"""RocketMQ's IndexFile (index/ of a store): hash slots and items for lookups by message key and
UNIQ_KEY. Imports store.format, store.log and store.errors; nothing above it."""
