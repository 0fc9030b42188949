"""A/B batches of step programs with statistics, on the local pool or a Ray fleet (issue 24)."""
