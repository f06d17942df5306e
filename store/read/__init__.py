"""Reading a store without its writer: the store's read-only view (view: segments, segment size,
commit point, committed end, layout problems, guarded mappings), the records past the commit point
(past_commit), and StoreReader, the public read API (reader, reader_arrow)."""
