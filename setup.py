"""The one part of the build pyproject.toml cannot state without a warning: the optional C
extensions, the compiled Kineto block decoder, the compiled nsys record decoder (both in
docs/FORMATS.md) and the nesting walk of ranges (perfdiff.model.intervals).  Optional: an
install without a C compiler goes on, and numpy does their work alone."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("perfdiff.importers.kineto._scan", ["src/perfdiff/importers/kineto/_scan.c"],
                             extra_compile_args=["-O2"], optional=True),
                   Extension("perfdiff.importers.nsys._pages", ["src/perfdiff/importers/nsys/_pages.c"],
                             extra_compile_args=["-O2"], optional=True),
                   Extension("perfdiff.model._nesting", ["src/perfdiff/model/_nesting.c"],
                             extra_compile_args=["-O2"], optional=True)])
