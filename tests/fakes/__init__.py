"""Scripted stand-ins for hardware and vendor libraries, for tests and benchmarks; nothing under src/ imports them."""
