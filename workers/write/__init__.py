"""The write path in workers: the outbox drain, its SQL, its tasks."""
