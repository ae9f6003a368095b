"""The vector index: targets and payloads, maintenance, re-embedding, their tasks."""
