"""The HTTP API (``memharness serve``): the client's calls over JSON, one tenant per API key.

Importing this package loads nothing heavy: FastAPI, uvicorn and the routes come with
``memharness.server.app`` when a server starts.
"""
