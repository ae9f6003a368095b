"""Task state: the SQL of checkpoints."""
