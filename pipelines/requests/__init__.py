"""One request model per operation, checked once: every way in (the Python clients, HTTP,
MCP, LangGraph) parses what it was given into one of these ``*Args`` and hands it to a driver.
Pure: nothing is stored or sent."""

from pipelines.requests.base import Args, Limits, invalid_from_validation

__all__ = ["Args", "Limits", "invalid_from_validation"]
