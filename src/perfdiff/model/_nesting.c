/* perfdiff.model._nesting: the depth and parent of ranges sorted per thread, in one pass.
 *
 * intervals.nesting_parent sorts the ranges by thread, start, longer first, input order, and
 * then (in numpy) counts for each range the ranges of its thread open when it starts (those
 * before it in that order, less those closed by then: a range whose end is at or before the
 * start, a zero-length one whose end is before it) and takes as its parent the last range
 * before it, on its thread, one level up.  depth_parent does the same from the sorted arrays:
 * a min-heap of the open ranges' ends (ties: a zero-length range's end after a range's) gives
 * the count, a table of the last range seen at each depth the parent.  Same inputs, same
 * answers as the numpy code, which tests check on generated and real ranges.
 *
 * Plain CPython C API; the arrays come in through the buffer protocol, the loop runs with the
 * GIL released, the results go back as bytearrays of native int64.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    int64_t end;
    int zero;  /* a zero-length range: it stays open at its own instant */
} Open;

static int closed_by(const Open *o, int64_t start)  /* (end, zero) <= (start, 0) */
{
    return o->end < start || (o->end == start && !o->zero);
}

static int before(const Open *a, const Open *b)
{
    return a->end < b->end || (a->end == b->end && a->zero < b->zero);
}

static void push(Open *heap, Py_ssize_t *n, Open v)
{
    Py_ssize_t i = (*n)++;
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if (!before(&v, &heap[up]))
            break;
        heap[i] = heap[up];
        i = up;
    }
    heap[i] = v;
}

static void pop(Open *heap, Py_ssize_t *n)
{
    Open last = heap[--(*n)];
    Py_ssize_t i = 0, m = *n;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= m)
            break;
        if (c + 1 < m && before(&heap[c + 1], &heap[c]))
            c++;
        if (!before(&heap[c], &last))
            break;
        heap[i] = heap[c];
        i = c;
    }
    if (m > 0)
        heap[i] = last;
}

/* tid, start, end: n ranges sorted by (thread, start, end descending, input order), end >= start.
 * depth[i], parent[i] (an index into the sorted ranges, -1: none) written. */
static int walk(const int64_t *tid, const int64_t *start, const int64_t *end, Py_ssize_t n, int64_t *depth,
                int64_t *parent)
{
    Open *heap = malloc((size_t)(n ? n : 1) * sizeof(Open));
    int64_t *last = malloc((size_t)(n ? n : 1) * sizeof(int64_t));      /* last range at each depth */
    Py_ssize_t *gen = malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t)); /* ... on which thread */
    if (!heap || !last || !gen) {
        free(heap);
        free(last);
        free(gen);
        return -1;
    }
    for (Py_ssize_t d = 0; d < n; d++)
        gen[d] = -1;
    Py_ssize_t open = 0, thread = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i == 0 || tid[i] != tid[i - 1]) {
            thread = i;  /* a new thread: nothing open, no range seen at any depth */
            open = 0;
        }
        while (open > 0 && closed_by(&heap[0], start[i]))
            pop(heap, &open);
        Py_ssize_t d = open;
        depth[i] = d;
        parent[i] = d > 0 && gen[d - 1] == thread ? last[d - 1] : -1;
        last[d] = i;
        gen[d] = thread;
        Open o = {end[i], end[i] == start[i]};
        push(heap, &open, o);
    }
    free(heap);
    free(last);
    free(gen);
    return 0;
}

static PyObject *depth_parent(PyObject *self, PyObject *args)
{
    Py_buffer t, s, e;
    if (!PyArg_ParseTuple(args, "y*y*y*", &t, &s, &e))
        return NULL;
    PyObject *out = NULL, *depth = NULL, *parent = NULL;
    Py_ssize_t n = t.len / 8;
    if (t.len % 8 || s.len != t.len || e.len != t.len || (uintptr_t)t.buf % _Alignof(int64_t)
        || (uintptr_t)s.buf % _Alignof(int64_t) || (uintptr_t)e.buf % _Alignof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "depth_parent(tid, start, end): three aligned int64 arrays of one length");
        goto done;
    }
    const int64_t *tid = t.buf, *start = s.buf, *end = e.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (end[i] < start[i] || (i > 0 && tid[i] == tid[i - 1] && start[i] < start[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "depth_parent: ranges not sorted by thread and start, or ending "
                                              "before they start");
            goto done;
        }
    }
    depth = PyByteArray_FromStringAndSize(NULL, n * 8);
    parent = PyByteArray_FromStringAndSize(NULL, n * 8);
    if (!depth || !parent)
        goto done;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = walk(tid, start, end, n, (int64_t *)PyByteArray_AS_STRING(depth), (int64_t *)PyByteArray_AS_STRING(parent));
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyTuple_Pack(2, depth, parent);
done:
    Py_XDECREF(depth);
    Py_XDECREF(parent);
    PyBuffer_Release(&t);
    PyBuffer_Release(&s);
    PyBuffer_Release(&e);
    return out;
}

static PyMethodDef methods[] = {
    {"depth_parent", depth_parent, METH_VARARGS,
     "depth_parent(tid, start, end) -> (depth, parent)\n\n"
     "Ranges sorted by thread, start, end descending (native int64 arrays of one length, end >= start):\n"
     "each one's nesting depth and parent (an index into the sorted ranges, -1: none), as bytearrays of\n"
     "native int64 (see _nesting.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nesting",
                                    "The depth and parent of sorted ranges, in one pass (see _nesting.c).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__nesting(void)
{
    return PyModule_Create(&module);
}
