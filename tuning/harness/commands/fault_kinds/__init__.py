"""The fault kinds, a module per kind or family."""
