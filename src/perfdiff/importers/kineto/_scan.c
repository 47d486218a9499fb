/* perfdiff.importers.kineto._scan: the compiled decoder of one block of a Kineto trace.
 *
 * It reads a block exactly as the numpy decoder (numpy_block.py, swar.py, objects.py) does, in one
 * pass over the bytes instead of several: a key is the bytes '"' ':' (found 16 bytes at a
 * time), recognised by the text before its closing quote; an event is the keys from one "ph"
 * key to the next; complete events ("ph": "X") of an imported category give one row of
 * int64 columns.  Wherever the numpy decoder would leave the file to the general reader
 * (NeedSlowPath), or would take a path this code does not follow (a key with whitespace
 * before its colon, a key twice in one event, an object whose first key is not "ph" next to
 * a complete event), scan_block returns None and the caller decodes the block with numpy:
 * the results are the same by construction, the numpy code decides the unusual cases.
 *
 * Plain CPython C API; the block is read through the buffer protocol with the GIL released
 * (two blocks decode at once), the columns come back as bytearrays of native int64.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Key ids, as numpy_block.py numbers them. */
enum { K_NONE, K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_CORR, K_STREAM, K_DEVICE, K_BYTES, K_ARGS, N_IDS };
static const char *KEY_TEXT[N_IDS] = {"", "ph", "cat", "name", "pid", "tid", "ts", "dur", "correlation",
                                      "stream", "device", "bytes", "args"};
static Py_ssize_t KEY_LEN[N_IDS];

/* Roles (events.ROLES) and the columns returned, in this order. */
enum { R_KERNEL, R_MEMCPY, R_MEMSET, R_API, R_CPU, R_GPU_RANGE };
enum { C_ROLE, C_CAT, C_NAME, C_PID, C_TID, C_TS, C_DUR, C_CORR, C_STREAM, C_DEVICE, C_BYTES, C_ARGS_AT,
       C_ARGS_LIMIT, N_COLS };
#define MISSING (-1)
#define MAX_US (INT64_MAX / 1000)
#define MAX_CATS 64

/* Set once by configure(): the category hashes (numpy_block.CAT_HASHES) and the role of each. */
static uint64_t cat_hash[MAX_CATS];
static int64_t cat_role[MAX_CATS + 1];
static Py_ssize_t n_cats = -1;

typedef struct {  /* an event being read: from its "ph" key to the next */
    Py_ssize_t ph;               /* closing quote of its "ph" key */
    int is_x;
    int dup;                     /* a key id met twice */
    Py_ssize_t first[N_IDS];     /* closing quote of the first key of each id; -1: none */
    Py_ssize_t next_q[N_IDS];    /* for "cat" and "name": the key right after (closing quote) */
    int next_k[N_IDS];           /* ... and its id (0: unknown, another event's, or none) */
} Event;

typedef struct {  /* a name's bytes in the block, and its code */
    uint64_t hash;
    Py_ssize_t at, len;
    int64_t code;
} Slot;

typedef struct {
    const uint8_t *b;
    Py_ssize_t size, begin, end;
    int64_t *col[N_COLS];
    Py_ssize_t rows, cap;
    Slot *slots;                 /* open addressing; at < 0: empty */
    Py_ssize_t nslots, nnames;
    Py_ssize_t *name_at, *name_len;  /* by code */
    Py_ssize_t names_cap;
    int64_t cat_seen[MAX_CATS + 1];
    int64_t n_begin, n_end, n_nocat; /* "ph": "B" / "E" events, complete events with no "cat" */
    Py_ssize_t first_ph;         /* closing quote of the first "ph" key; -1: none */
    Event ev;
    int in_event, prev_x, pending;
    int last_cat;
} Scan;

enum { OK = 0, PUNT = 1, NOMEM = 2 };

static inline uint8_t at(const Scan *s, Py_ssize_t i) { return (i >= 0 && i < s->size) ? s->b[i] : 0; }
static inline int is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* Position of the last byte before `before`, at most 16 back, that is not whitespace (and not
 * ',' when `comma`); -1 when there is none (swar.last_non_separator). */
static Py_ssize_t last_non_separator(const Scan *s, Py_ssize_t before, int comma)
{
    for (Py_ssize_t i = before - 1; i >= before - 16 && i >= 0; i--) {
        uint8_t c = s->b[i];
        if (!is_ws(c) && !(comma && c == ','))
            return i;
    }
    return -1;
}

static inline uint64_t load8(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);  /* little-endian: PyInit__scan checks */
    return w;
}

/* Per key id: '"' and its text, the last 8 bytes of them as the top bytes of a word (shift:
 * 64 - 8 * their length) ending at the closing quote; "correlation" also checks "\"cor". */
static int KEY_SHIFT[N_IDS];
static uint64_t KEY_PATTERN[N_IDS];
static uint32_t CORR_HEAD;

/* The id of the key whose closing quote is at q (q >= 12): the bytes before it are '"' and
 * the key's text (numpy_block._key_ids). */
static inline int key_id(const Scan *s, Py_ssize_t q)
{
    static const int8_t by_last[256] = {['h'] = 1, ['t'] = 2, ['e'] = 3, ['d'] = 4, ['s'] = 5, ['r'] = 6,
                                        ['n'] = 7, ['m'] = 8};
    static const int8_t cand[9][3] = {{0}, {K_PH}, {K_CAT}, {K_NAME, K_DEVICE}, {K_PID, K_TID},
                                      {K_TS, K_BYTES, K_ARGS}, {K_DUR}, {K_CORR}, {K_STREAM}};
    int g = by_last[s->b[q - 1]];
    if (!g)
        return 0;
    uint64_t w = load8(s->b + q - 8);
    for (int j = 0; j < 3 && cand[g][j]; j++) {
        int k = cand[g][j];
        if ((w >> KEY_SHIFT[k]) == KEY_PATTERN[k]) {
            uint32_t head;
            memcpy(&head, s->b + q - 12, 4);
            return k != K_CORR || head == CORR_HEAD ? k : 0;
        }
    }
    return 0;
}

/* The value after the key closing at q: past the colon and at most 8 bytes <= 32. */
static inline Py_ssize_t value_pos(const Scan *s, Py_ssize_t q)
{
    Py_ssize_t v = q + 2;
    for (int i = 0; i < 8 && at(s, v) <= 32; i++)
        v++;
    return v;
}

typedef struct { int64_t value, frac_ns; int ok, whole; } Number;

/* A JSON number at v as swar.parse_numbers reads it: up to 24 integer digits (ok: 1 to 18),
 * the first three decimals as ns, no exponent. */
static Number parse_number(const Scan *s, Py_ssize_t v)
{
    Number r = {0, 0, 0, 1};
    int neg = at(s, v) == '-';
    Py_ssize_t p = v + neg;
    uint64_t val = 0;
    int nd = 0;
    while (nd < 24 && is_digit(at(s, p + nd))) {
        val = val * 10 + (uint64_t)(at(s, p + nd) - '0');
        nd++;
    }
    Py_ssize_t e = p + nd;
    uint8_t after = at(s, e);
    if (after == '.') {
        r.whole = 0;
        Py_ssize_t q = e + 1;
        int64_t frac = 0;
        int m = 0;
        while (is_digit(at(s, q + m))) {
            if (m < 3)
                frac = frac * 10 + (at(s, q + m) - '0');
            m++;
        }
        for (int k = m; k < 3; k++)
            frac *= 10;
        r.frac_ns = frac;
        after = at(s, q + m);
    }
    r.ok = nd > 0 && nd <= 18 && after != 'e' && after != 'E';
    r.value = (int64_t)(neg ? 0 - val : val);  /* wraps as numpy's int64 does */
    if (neg)
        r.frac_ns = -r.frac_ns;
    return r;
}

/* The first '"' or '\\' at or after start, read in words of 8 as swar.string_ends does (a
 * word starting at or beyond `limit` is not read: `limit` then). */
static Py_ssize_t scan_string(const Scan *s, Py_ssize_t start, Py_ssize_t limit)
{
    for (Py_ssize_t p = start;; p++) {
        if (p > start && ((p - start) & 7) == 0 && p >= limit)
            return limit;
        uint8_t c = at(s, p);
        if (c == '"' || c == '\\')
            return p;
        if (p >= s->size)
            return limit;
    }
}

/* (end, escaped) of the string value starting at `start` of the key whose next key is
 * (next_q, next_k): the last quote before that key when it is one of this event's
 * (numpy_block._decode.string_end), else a scan. */
static Py_ssize_t string_end(const Scan *s, Py_ssize_t start, Py_ssize_t next_q, int next_k, int *esc)
{
    if (next_k > 0) {
        Py_ssize_t close = last_non_separator(s, next_q - KEY_LEN[next_k] - 1, 1);
        if (close >= start && s->b[close] == '"') {
            *esc = 0;
            return close;
        }
    }
    Py_ssize_t e = scan_string(s, start, s->end);
    *esc = at(s, e) == '\\';
    return e;
}

/* A pid/tid (swar.int_or_string): an integer, or the number at the first digit of a string. */
static int64_t int_or_string(const Scan *s, Py_ssize_t v)
{
    if (at(s, v) != '"') {
        Number n = parse_number(s, v);
        return n.ok && n.whole ? n.value : MISSING;
    }
    Py_ssize_t s0 = v + 1, s1 = scan_string(s, s0, s->end);
    for (Py_ssize_t i = 0; i < s1 - s0; i++) {
        if (is_digit(at(s, s0 + i))) {
            Number n = parse_number(s, s0 + i);
            return n.ok ? n.value : MISSING;
        }
    }
    return MISSING;
}

static inline int64_t optional_int(const Scan *s, Py_ssize_t q)
{
    if (q < 0)
        return MISSING;
    Number n = parse_number(s, value_pos(s, q));
    return n.ok && n.whole ? n.value : MISSING;
}

static uint64_t bytes_hash(const uint8_t *p, Py_ssize_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    for (Py_ssize_t k = 0; i + k < n; k++)
        w |= (uint64_t)p[i + k] << (8 * k);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

/* The block-local code of the name at [at, at + len): first seen, first numbered (as Arrow's
 * dictionary_encode numbers them).  -1: out of memory. */
static int64_t name_code(Scan *s, Py_ssize_t pos, Py_ssize_t len)
{
    if (2 * (s->nnames + 1) > s->nslots) {
        Py_ssize_t n = s->nslots ? 2 * s->nslots : 1024;
        Slot *t = malloc(n * sizeof(Slot));
        if (!t)
            return -1;
        for (Py_ssize_t i = 0; i < n; i++)
            t[i].at = -1;
        for (Py_ssize_t i = 0; i < s->nslots; i++) {
            if (s->slots[i].at < 0)
                continue;
            Py_ssize_t j = (Py_ssize_t)(s->slots[i].hash & (uint64_t)(n - 1));
            while (t[j].at >= 0)
                j = (j + 1) & (n - 1);
            t[j] = s->slots[i];
        }
        free(s->slots);
        s->slots = t;
        s->nslots = n;
    }
    uint64_t h = bytes_hash(s->b + pos, len);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(s->nslots - 1));
    while (s->slots[j].at >= 0) {
        Slot *e = &s->slots[j];
        if (e->hash == h && e->len == len && memcmp(s->b + e->at, s->b + pos, len) == 0)
            return e->code;
        j = (j + 1) & (s->nslots - 1);
    }
    if (s->nnames == s->names_cap) {
        Py_ssize_t n = s->names_cap ? 2 * s->names_cap : 256;
        Py_ssize_t *a = realloc(s->name_at, n * sizeof(Py_ssize_t));
        if (!a)
            return -1;
        s->name_at = a;
        Py_ssize_t *l = realloc(s->name_len, n * sizeof(Py_ssize_t));
        if (!l)
            return -1;
        s->name_len = l;
        s->names_cap = n;
    }
    s->slots[j] = (Slot){h, pos, len, s->nnames};
    s->name_at[s->nnames] = pos;
    s->name_len[s->nnames] = len;
    return s->nnames++;
}

/* numpy_block._cat_hash of the category's first 24 bytes and its length. */
static uint64_t cat_hash_of(const Scan *s, Py_ssize_t c0, Py_ssize_t len)
{
    static const uint64_t K[3] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull};
    Py_ssize_t m = len < 24 ? len : 24;
    uint64_t h = 0;
    for (int k = 0; k < 3; k++) {
        uint64_t w = 0;
        for (Py_ssize_t i = 0; i < 8 && 8 * k + i < m; i++)
            w |= (uint64_t)at(s, c0 + 8 * k + i) << (8 * i);
        h ^= w * K[k];
    }
    return h ^ ((uint64_t)len * 0x27D4EB2F165667C5ull);
}

static int grow(Scan *s)
{
    Py_ssize_t n = s->cap ? 2 * s->cap : 4096;
    for (int c = 0; c < N_COLS; c++) {
        int64_t *p = realloc(s->col[c], n * sizeof(int64_t));
        if (!p)
            return NOMEM;
        s->col[c] = p;
    }
    s->cap = n;
    return OK;
}

/* The row of the complete event s->ev (its keys end before `limit`), if it is imported. */
static int finish_event(Scan *s, Py_ssize_t limit)
{
    Event *e = &s->ev;
    if (!e->is_x)
        return OK;
    if (e->dup)
        return PUNT;
    Py_ssize_t cq = e->first[K_CAT];
    if (cq < 0) {
        s->n_nocat++;
        return OK;
    }
    Py_ssize_t vc = value_pos(s, cq);
    if (at(s, vc) != '"')
        return PUNT;
    int esc;
    Py_ssize_t c0 = vc + 1, c1 = string_end(s, c0, e->next_q[K_CAT], e->next_k[K_CAT], &esc);
    Py_ssize_t clen = c1 - c0;
    int cat = (int)n_cats;
    if (clen <= 24 && !esc) {
        uint64_t h = cat_hash_of(s, c0, clen);
        if (s->last_cat >= 0 && cat_hash[s->last_cat] == h) {
            cat = s->last_cat;
        } else {
            for (int i = 0; i < n_cats; i++)
                if (cat_hash[i] == h) {
                    cat = s->last_cat = i;
                    break;
                }
        }
    }
    s->cat_seen[cat]++;
    int64_t role = cat_role[cat];
    if (role < 0)
        return OK;
    for (int k = K_NAME; k <= K_DUR; k++)
        if (e->first[k] < 0)
            return PUNT;
    Py_ssize_t vn = value_pos(s, e->first[K_NAME]);
    if (at(s, vn) != '"')
        return PUNT;
    Py_ssize_t s0 = vn + 1, s1 = string_end(s, s0, e->next_q[K_NAME], e->next_k[K_NAME], &esc);
    if (esc) {  /* swar.escaped_ends */
        Py_ssize_t j = s1;
        while (j < s->end) {
            if (s->b[j] == '\\') {
                j += 2;
                continue;
            }
            if (s->b[j] == '"')
                break;
            j++;
        }
        s1 = j;
    }
    if (s1 >= s->end)
        return PUNT;
    Number ts = parse_number(s, value_pos(s, e->first[K_TS]));
    Number dur = parse_number(s, value_pos(s, e->first[K_DUR]));
    if (!ts.ok || !dur.ok || ts.value > MAX_US || ts.value < -MAX_US || dur.value > MAX_US || dur.value < -MAX_US)
        return PUNT;
    if (s->rows == s->cap && grow(s) != OK)
        return NOMEM;
    int64_t code = name_code(s, s0, s1 - s0);
    if (code < 0)
        return NOMEM;
    int64_t pid = int_or_string(s, value_pos(s, e->first[K_PID]));
    int64_t tid = int_or_string(s, value_pos(s, e->first[K_TID]));
    int on_gpu = role <= R_MEMSET || role == R_GPU_RANGE;
    Py_ssize_t r = s->rows++;
    s->col[C_ROLE][r] = role;
    s->col[C_CAT][r] = cat;
    s->col[C_NAME][r] = code;
    s->col[C_PID][r] = pid;
    s->col[C_TID][r] = tid;
    s->col[C_TS][r] = (int64_t)((uint64_t)ts.value * 1000u + (uint64_t)ts.frac_ns);  /* numpy's wrap */
    s->col[C_DUR][r] = (int64_t)((uint64_t)dur.value * 1000u + (uint64_t)dur.frac_ns);
    s->col[C_CORR][r] = optional_int(s, e->first[K_CORR]);
    s->col[C_BYTES][r] = role == R_MEMCPY || role == R_MEMSET ? optional_int(s, e->first[K_BYTES]) : MISSING;
    s->col[C_DEVICE][r] = on_gpu && pid < 0 ? optional_int(s, e->first[K_DEVICE]) : MISSING;
    s->col[C_STREAM][r] = on_gpu && tid < 0 ? optional_int(s, e->first[K_STREAM]) : MISSING;
    int args = role == R_KERNEL && e->first[K_ARGS] >= 0;
    s->col[C_ARGS_AT][r] = args ? value_pos(s, e->first[K_ARGS]) : -1;
    s->col[C_ARGS_LIMIT][r] = args ? limit : -1;
    return OK;
}

/* One key, its closing quote at q. */
static int on_key(Scan *s, Py_ssize_t q)
{
    int k = key_id(s, q);
    if (s->pending) {  /* the key right after an event's first "cat" / "name" */
        s->ev.next_q[s->pending] = q;
        s->ev.next_k[s->pending] = k == K_PH ? 0 : k;
        s->pending = 0;
    }
    if (k == K_PH) {
        /* Does this "ph" open its object ("{" before it)?  One that does not, next to a
         * complete event, is left to the numpy decoder (objects.keys_of_the_next_object). */
        Py_ssize_t before = last_non_separator(s, q - 3, 0);
        int opens = before >= 0 && s->b[before] == '{';
        Py_ssize_t v = value_pos(s, q);
        uint8_t ph = at(s, v) == '"' ? at(s, v + 1) : 0;
        int is_x = ph == 'X';
        if (s->in_event) {
            if (!opens && s->ev.is_x)
                return PUNT;
            int rc = finish_event(s, q);
            if (rc != OK)
                return rc;
        } else {
            s->first_ph = q;
        }
        if (!opens && is_x)
            return PUNT;
        s->n_begin += ph == 'B';
        s->n_end += ph == 'E';
        s->in_event = 1;
        s->ev.ph = q;
        s->ev.is_x = is_x;
        s->ev.dup = 0;
        for (int i = 0; i < N_IDS; i++) {
            s->ev.first[i] = -1;
            s->ev.next_k[i] = 0;
        }
        s->ev.first[K_PH] = q;
        return OK;
    }
    if (k == 0 || !s->in_event)
        return OK;
    if (s->ev.first[k] >= 0) {
        s->ev.dup = 1;  /* objects.first_keys / same_object: numpy decides */
        return OK;
    }
    s->ev.first[k] = q;
    if (k == K_CAT || k == K_NAME)
        s->pending = k;
    return OK;
}

/* Every '"' ':' in [begin, end): ':' at p from begin + 1 on, its key's closing quote at p - 1. */
static int scan(Scan *s)
{
    const uint8_t *b = s->b;
    Py_ssize_t p = s->begin + 1, end = s->end;
#if defined(__SSE2__)
    const __m128i colon = _mm_set1_epi8(':'), quote = _mm_set1_epi8('"'), space = _mm_set1_epi8(' ');
    for (; p + 16 <= end; p += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(b + p));
        unsigned c = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, colon));
        if (!c)
            continue;
        __m128i w = _mm_loadu_si128((const __m128i *)(b + p - 1));
        unsigned ws = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(w, space), space));
        if (c & ws)
            return PUNT;  /* a byte <= 32 before a colon: maybe a key written '"key" :' */
        unsigned m = c & (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(w, quote));
        while (m) {
            int rc = on_key(s, p + __builtin_ctz(m) - 1);
            if (rc != OK)
                return rc;
            m &= m - 1;
        }
    }
#endif
    for (; p < end; p++) {
        if (b[p] != ':')
            continue;
        if (b[p - 1] <= 32)
            return PUNT;
        if (b[p - 1] == '"') {
            int rc = on_key(s, p - 1);
            if (rc != OK)
                return rc;
        }
    }
    if (!s->in_event)
        return PUNT;  /* no event: the numpy decoder keeps the head */
    return finish_event(s, end);
}

static PyObject *column(const int64_t *p, Py_ssize_t n)  /* a bytearray: numpy views it writable */
{
    return PyByteArray_FromStringAndSize(n ? (const char *)p : "", n * (Py_ssize_t)sizeof(int64_t));
}

static PyObject *scan_block(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t begin, end;
    if (!PyArg_ParseTuple(args, "y*nn", &buf, &begin, &end))
        return NULL;
    if (n_cats < 0) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    if (begin < 16 || end <= begin || end > buf.len - 64) {  /* not end + 64: it can overflow */
        PyBuffer_Release(&buf);
        Py_RETURN_NONE;  /* not the padded block scan.py makes: the numpy decoder reads it */
    }
    Scan *s = calloc(1, sizeof(Scan));
    if (!s) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    s->b = buf.buf;
    s->size = buf.len;
    s->begin = begin;
    s->end = end;
    s->first_ph = -1;
    s->last_cat = -1;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = scan(s);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (rc == NOMEM) {
        PyErr_NoMemory();
    } else if (rc == PUNT) {
        out = Py_NewRef(Py_None);
    } else {
        PyObject *cols = PyTuple_New(N_COLS), *names = PyList_New(s->nnames);
        PyObject *seen = column(s->cat_seen, n_cats + 1);
        if (cols && names && seen) {
            int bad = 0;
            for (int c = 0; c < N_COLS && !bad; c++) {
                PyObject *col = column(s->col[c], s->rows);
                bad = col == NULL;
                if (col)
                    PyTuple_SET_ITEM(cols, c, col);
            }
            for (Py_ssize_t i = 0; i < s->nnames && !bad; i++) {
                PyObject *nm = PyBytes_FromStringAndSize((const char *)s->b + s->name_at[i], s->name_len[i]);
                bad = nm == NULL;
                if (nm)
                    PyList_SET_ITEM(names, i, nm);
            }
            if (!bad)
                out = Py_BuildValue("(nOOOLLL)", s->first_ph, cols, names, seen, (long long)s->n_begin,
                                    (long long)s->n_end, (long long)s->n_nocat);
        }
        Py_XDECREF(cols);
        Py_XDECREF(names);
        Py_XDECREF(seen);
    }
    for (int c = 0; c < N_COLS; c++)
        free(s->col[c]);
    free(s->slots);
    free(s->name_at);
    free(s->name_len);
    free(s);
    PyBuffer_Release(&buf);
    return out;
}

static PyObject *configure(PyObject *self, PyObject *args)
{
    Py_buffer hashes, roles;
    if (!PyArg_ParseTuple(args, "y*y*", &hashes, &roles))
        return NULL;
    Py_ssize_t n = hashes.len / 8;
    if (hashes.len % 8 || n > MAX_CATS || roles.len != (n + 1) * 8) {
        PyBuffer_Release(&hashes);
        PyBuffer_Release(&roles);
        PyErr_SetString(PyExc_ValueError, "configure(hashes: n uint64, roles: n + 1 int64)");
        return NULL;
    }
    memcpy(cat_hash, hashes.buf, hashes.len);
    memcpy(cat_role, roles.buf, roles.len);
    n_cats = n;
    PyBuffer_Release(&hashes);
    PyBuffer_Release(&roles);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(hashes, roles): the category hashes (n native uint64, numpy_block.CAT_HASHES) and the role\n"
     "of each and of an unknown category (n + 1 native int64; -1: not imported)."},
    {"scan_block", scan_block, METH_VARARGS,
     "scan_block(padded, begin, end) -> None or (first_ph, columns, names, cat_seen, n_B, n_E, n_nocat)\n\n"
     "Decode the complete events in padded[begin:end] (16 bytes or more before begin, 64 after end).\n"
     "None: a block the numpy decoder must read.  columns: 13 bytearrays of native int64 (role, cat,\n"
     "name, pid, tid, ts_ns, dur_ns, corr, stream, device, nbytes, args_at, args_limit); names: the\n"
     "raw name bytes by block-local code; first_ph: the closing quote of the first \"ph\" key."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan",
                                    "The compiled decoder of one block of a Kineto trace (see _scan.c).", -1, methods};

PyMODINIT_FUNC PyInit__scan(void)
{
    const uint16_t one = 1;
    if (*(const uint8_t *)&one != 1) {
        PyErr_SetString(PyExc_ImportError, "the compiled Kineto decoder needs a little-endian machine");
        return NULL;
    }
    for (int k = 1; k < N_IDS; k++) {
        uint8_t tail[16];
        size_t len = strlen(KEY_TEXT[k]);
        KEY_LEN[k] = (Py_ssize_t)len;
        tail[0] = '"';
        memcpy(tail + 1, KEY_TEXT[k], len);
        size_t n = len + 1 > 8 ? 8 : len + 1;
        uint64_t w = 0;
        for (size_t i = 0; i < n; i++)
            w |= (uint64_t)tail[len + 1 - n + i] << (8 * i);
        KEY_PATTERN[k] = w;
        KEY_SHIFT[k] = (int)(64 - 8 * n);
    }
    memcpy(&CORR_HEAD, "\"cor", 4);
    return PyModule_Create(&module);
}
