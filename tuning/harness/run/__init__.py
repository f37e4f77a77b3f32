"""One run: start, follow, restarts, teardown; leftovers of dead runs; progress."""
