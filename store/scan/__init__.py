"""Many CommitLog records read at once from the bytes that hold them (store.format says what one
record is): the walk of a segment along TOTALSIZE (walk), RocketMQ's record checks with our
PHYSICALOFFSET rule over a segment (record_check: recovery and verify) and over records encoded
elsewhere (encoded_check: the spool files), the fields verify needs (fields, prop_crc), and records as
Arrow columns for the read-back (record_batch, arrow_text). Four small C passes are optional (numpy
gives the same result, and the tests hold the two equal): _scan_walk.c, _record_check.c,
_record_columns.c, _properties_split.c. Imports nothing of store but store.format and store.errors.
"""
