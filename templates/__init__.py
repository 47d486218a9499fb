"""Jinja2 templates of the report (package data)."""
