/* perfdiff.importers.nsys._pages: integer columns of SQLite table rows, decoded in C.
 *
 * pages.py finds the cells of a table's rows (its B-tree walk, with numpy) and decodes their
 * records a block of rows at a time.  read_cells does that decoding for one block in one pass
 * over the rows instead of a numpy pass per varint byte and per column.  It follows
 * PageReader._read_general row by row (sqlite.org/fileformat2.html, "Record Format"): the
 * cell's payload length and rowid varints, the record's header size, the serial types up to
 * the last wanted column (a column missing from a short header is NULL), then each wanted
 * value, a big-endian signed integer of 1, 2, 3, 4, 6 or 8 bytes, 0 or 1 (types 8, 9), or
 * NULL (MISSING).  Whatever the numpy code would refuse or would read another way -- a row
 * that spills to overflow pages, a text, blob, float or reserved type in a wanted column, a
 * reserved type before it, a record longer than its payload, a byte outside the file --
 * makes read_cells return None, and the caller decodes the block with numpy, which decides.
 *
 * Plain CPython C API; the file is read through the buffer protocol with the GIL released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MISSING (-1)  /* perfdiff.model.schema.MISSING: a NULL value */
#define MAX_COLUMN 32767  /* SQLite's own largest number of columns (SQLITE_MAX_COLUMN) */

enum { OK, PUNT, NOMEM };

/* The varint at b[pos] (SQLite's: big-endian 7 bits a byte, the ninth byte whole); its
 * length in bytes, 0 where it runs past `size`. */
static int varint(const uint8_t *b, Py_ssize_t size, Py_ssize_t pos, uint64_t *val)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++) {
        if (pos < 0 || pos + k >= size)
            return 0;
        uint8_t c = b[pos + k];
        v = (v << 7) | (c & 0x7F);
        if (!(c & 0x80)) {
            *val = v;
            return k + 1;
        }
    }
    if (pos + 8 >= size)
        return 0;
    *val = (v << 8) | b[pos + 8];
    return 9;
}

/* Bytes stored for serial types 0..11 (10, 11 are reserved; 12 and up: text and blobs). */
static const int64_t SERIAL_SIZE[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0};

static int64_t big_endian(const uint8_t *p, int64_t n)  /* signed, n = 1..8 bytes */
{
    uint64_t v = 0;
    for (int64_t i = 0; i < n; i++)
        v = (v << 8) | p[i];
    int shift = (int)(64 - 8 * n);
    return shift ? ((int64_t)(v << shift)) >> shift : (int64_t)v;
}

typedef struct {
    const uint8_t *b;
    Py_ssize_t size;      /* bytes of the file */
    const int64_t *cells; /* file offset of each row's cell */
    Py_ssize_t n;
    const int64_t *want;  /* wanted column numbers, ascending */
    Py_ssize_t nwant;
    int64_t usable;       /* the page's usable bytes */
    int64_t *out;         /* nwant x n, column-major by wanted column */
} Read;

static int read_rows(Read *r)
{
    const uint8_t *b = r->b;
    const int64_t last = r->want[r->nwant - 1];
    for (Py_ssize_t i = 0; i < r->n; i++) {
        Py_ssize_t pos = (Py_ssize_t)r->cells[i];
        uint64_t payload, rowid, hsize, st;
        int l1 = varint(b, r->size, pos, &payload);
        if (!l1 || (int64_t)payload < 0 || (int64_t)payload > r->usable - 35)
            return PUNT;  /* spills to overflow pages (or is no cell) */
        int l2 = varint(b, r->size, pos + l1, &rowid);
        if (!l2)
            return PUNT;
        Py_ssize_t rec = pos + l1 + l2;
        if ((int64_t)payload > (int64_t)(r->size - rec))
            return PUNT;
        Py_ssize_t rec_end = rec + (Py_ssize_t)payload;
        int l3 = varint(b, r->size, rec, &hsize);
        if (!l3 || hsize > payload)
            return PUNT;
        Py_ssize_t hdr_end = rec + (Py_ssize_t)hsize, cursor = rec + l3, body = hdr_end;
        int64_t offset = 0;
        Py_ssize_t w = 0;
        for (int64_t col = 0; col <= last; col++) {
            st = 0;  /* a column added after the row was written: NULL */
            if (cursor < hdr_end) {
                int ln = varint(b, r->size, cursor, &st);
                if (!ln)
                    return PUNT;
                cursor += ln;
            }
            if (st == 10 || st == 11 || st > (uint64_t)INT64_MAX)
                return PUNT;
            int64_t size = st >= 12 ? (int64_t)((st - 12) >> 1) : SERIAL_SIZE[st];
            if (col == r->want[w]) {
                int64_t v;
                if (st == 0)
                    v = MISSING;
                else if (st == 8)
                    v = 0;
                else if (st == 9)
                    v = 1;
                else if (st <= 6) {
                    if (offset > (int64_t)(rec_end - body) - size)
                        return PUNT;
                    v = big_endian(b + body + offset, size);
                } else
                    return PUNT;  /* a float, text or blob where an integer is wanted */
                r->out[w * r->n + i] = v;
                w++;
            }
            if (size > (int64_t)(rec_end - body) - offset)
                return PUNT;  /* the record is longer than its payload */
            offset += size;
        }
    }
    return OK;
}

static PyObject *read_cells(PyObject *self, PyObject *args)
{
    Py_buffer file, cells, want;
    long long usable;
    if (!PyArg_ParseTuple(args, "y*y*y*L", &file, &cells, &want, &usable))
        return NULL;
    PyObject *out = NULL;
    Read r = {file.buf, file.len, cells.buf, cells.len / 8, want.buf, want.len / 8, usable, NULL};
    /* The int64 arrays are read in place: whole, aligned (numpy's are). */
    int ok_args = cells.len % 8 == 0 && want.len % 8 == 0 && r.nwant >= 1
                  && (uintptr_t)cells.buf % _Alignof(int64_t) == 0 && (uintptr_t)want.buf % _Alignof(int64_t) == 0;
    for (Py_ssize_t k = 0; ok_args && k < r.nwant; k++)
        ok_args = r.want[k] >= 0 && (k == 0 || r.want[k] > r.want[k - 1]);
    if (!ok_args) {
        PyErr_SetString(PyExc_ValueError, "read_cells(file, cells: int64, want: ascending int64 column numbers, "
                                          "usable): aligned arrays of whole int64");
        goto done;
    }
    if (usable < 480 || usable > 65536 || r.want[r.nwant - 1] > MAX_COLUMN) {
        out = Py_NewRef(Py_None);  /* no page SQLite writes, no table it makes: numpy decides */
        goto done;
    }
    if (r.n == 0) {
        out = PyByteArray_FromStringAndSize("", 0);
        goto done;
    }
    if (r.n > PY_SSIZE_T_MAX / 8 / r.nwant) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyByteArray_FromStringAndSize(NULL, r.n * r.nwant * 8);
    if (out == NULL)
        goto done;
    r.out = (int64_t *)PyByteArray_AS_STRING(out);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = read_rows(&r);
    Py_END_ALLOW_THREADS
    if (rc != OK) {
        Py_CLEAR(out);
        out = Py_NewRef(Py_None);
    }
done:
    PyBuffer_Release(&file);
    PyBuffer_Release(&cells);
    PyBuffer_Release(&want);
    return out;
}

static PyMethodDef methods[] = {
    {"read_cells", read_cells, METH_VARARGS,
     "read_cells(file, cells, want, usable) -> None or bytearray\n\n"
     "The integer columns numbered `want` (native int64, ascending) of the table rows whose cells\n"
     "start at the file offsets `cells` (native int64) of `file` (the SQLite file's bytes; `usable`:\n"
     "a page's usable bytes): len(want) x len(cells) native int64, one wanted column after the\n"
     "other, NULL as -1.  None: a block the numpy reader must decode (see _pages.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pages",
                                    "Integer columns of SQLite table rows, decoded in C (see _pages.c).", -1, methods};

PyMODINIT_FUNC PyInit__pages(void)
{
    return PyModule_Create(&module);
}
