"""Owning memories: corrections, forgetting, history, listing, export and import."""
