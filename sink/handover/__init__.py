"""The hand-over between ingest's read tasks and the sink's driver, both halves in one place: the
batch's form (schema), how it crosses Spark packed (packed), or a shared disk as spool files
(spool_task in the task, spool on the driver), and the path checks those files rest on (trust).
Imports nothing of the rest of sink: only store's public face (and store.format)."""
