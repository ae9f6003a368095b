"""One module per resource; ``memharness.server.app`` includes each module's ``router``."""
