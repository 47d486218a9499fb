#!/bin/sh
# perfdiff's C extensions under AddressSanitizer and UndefinedBehaviorSanitizer: the compiled
# Kineto decoder (src/perfdiff/importers/kineto/_scan.c), the compiled nsys record decoder
# (src/perfdiff/importers/nsys/_pages.c) and the nesting walk (src/perfdiff/model/_nesting.c).
# A copy of src/ with all three built sanitized, then their tests (tests/test_kineto_compiled.py:
# real traces, blocks cut at every byte, odd bytes spliced in, generated and hypothesis-made
# events; tests/test_nsys_pages_compiled.py: real exports, every kind of value, literal records
# cut at every byte; tests/test_intervals_compiled.py: hypothesis-made and real ranges) run
# against that copy.  Python
# allocates through malloc (PYTHONMALLOC=malloc), so a read past a buffer stops the run with
# ASan's report.
# Usage: tools/sanitize.sh [PYTHON]   (default .venv/bin/python; needs gcc)
# pytest captures sys.stdout/err only (--capture=sys): a sanitizer stops the process, and a report
# written to a captured file descriptor would be lost with it.
set -eu
PY=${1:-.venv/bin/python}
here=$(pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/perfdiff-sanitize.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp -r src "$tmp/src"
suffix=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
inc=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
for ext in importers/kineto/_scan importers/nsys/_pages model/_nesting; do
    rm -f "$tmp/src/perfdiff/$ext"*.so
    gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
        -I"$inc" "src/perfdiff/$ext.c" -o "$tmp/src/perfdiff/$ext$suffix"
done
run() {
    LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    PYTHONMALLOC=malloc PYTHONPATH="$tmp/src" "$PY" "$@"
}
run -c "import sys, perfdiff.importers.kineto._scan as k, perfdiff.importers.nsys._pages as p, perfdiff.model._nesting as n
for m in (k, p, n):
    assert m.__file__.startswith(sys.argv[1]), m.__file__
    print('sanitized:', m.__file__)" "$tmp"
cd "$here"
run -m pytest -q -p no:cacheprovider --capture=sys tests/test_kineto_compiled.py tests/test_nsys_pages_compiled.py \
    tests/test_intervals_compiled.py
