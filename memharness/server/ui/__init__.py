"""The memory inspector: server-rendered pages under ``/ui`` of ``memharness serve``."""
