#!/bin/sh
# The compiled Kineto decoder (src/perfdiff/importers/kineto/_scan.c) under AddressSanitizer and
# UndefinedBehaviorSanitizer: a copy of src/ with the decoder built sanitized, then its tests
# (tests/test_kineto_compiled.py: real traces, blocks cut at every byte, odd bytes spliced in,
# generated and hypothesis-made events) run against that copy.  Python allocates through malloc
# (PYTHONMALLOC=malloc), so a read past a block's padding stops the run with ASan's report.
# Usage: tools/sanitize_scan.sh [PYTHON]   (default .venv/bin/python; needs gcc)
# pytest captures sys.stdout/err only (--capture=sys): a sanitizer stops the process, and a report
# written to a captured file descriptor would be lost with it.
set -eu
PY=${1:-.venv/bin/python}
here=$(pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/perfdiff-sanitize.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp -r src "$tmp/src"
so=$("$PY" -c "import sysconfig; print('_scan' + sysconfig.get_config_var('EXT_SUFFIX'))")
inc=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
rm -f "$tmp"/src/perfdiff/importers/kineto/_scan*.so
gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -I"$inc" src/perfdiff/importers/kineto/_scan.c -o "$tmp/src/perfdiff/importers/kineto/$so"
LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
PYTHONMALLOC=malloc PYTHONPATH="$tmp/src" \
    "$PY" -c "import perfdiff.importers.kineto._scan as m, sys; assert m.__file__.startswith(sys.argv[1]), m.__file__; print('sanitized decoder:', m.__file__)" "$tmp"
cd "$here"
LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
PYTHONMALLOC=malloc PYTHONPATH="$tmp/src" \
    "$PY" -m pytest -q -p no:cacheprovider --capture=sys tests/test_kineto_compiled.py
