"""Configuration: one pydantic-settings ``Settings``, the only reader of the environment."""

from config.settings import Settings, get_settings

__all__ = ["Settings", "get_settings"]
