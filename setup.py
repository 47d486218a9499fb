"""The one part of the build pyproject.toml cannot state without a warning: the optional C
extensions, the compiled Kineto block decoder and the compiled nsys page reader
(docs/FORMATS.md).  Optional: an install without a C compiler goes on, and the readers decode
with numpy alone."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("perfdiff.importers.kineto._scan", ["src/perfdiff/importers/kineto/_scan.c"],
                             extra_compile_args=["-O2"], optional=True),
                   Extension("perfdiff.importers.nsys._pages", ["src/perfdiff/importers/nsys/_pages.c"],
                             extra_compile_args=["-O2"], optional=True)])
