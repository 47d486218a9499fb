"""Samplers and tracers: the only code that touches hardware or live processes."""
