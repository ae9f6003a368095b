"""The read path in workers: context() where the vectors are, recalls, the window, bumps."""
