"""Owning memories, the pure part: versions, erasure plans, history and the export format."""
