"""Background cognition in workers: compression, quality, decay, consolidation, links."""
