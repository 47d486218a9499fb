"""perfdiff's version, in a module of its own so that any stage can read it without importing
the package's public face (perfdiff/__init__.py)."""
__version__ = "0.1.0"
