/*
 * quorum.wire._walk: the leader's record walk (quorum.wire.records._walk_records) compiled.
 *
 * Why C: the walk was 38% of a leader's Produce CPU (1.1-1.5 us a record in Python, issue 37),
 * and it is a byte loop with no objects in it, which the plain CPython C API compiles with the
 * compiler and headers the install already needs; no build dependency beyond setuptools.
 *
 * The contract that keeps it equal to the Python walk: walk() either returns the walk's summary,
 * exactly the tuple the Python walk would return, or None, meaning "not sure": the caller then
 * runs the Python walk, which raises the fault with its reason and position, or answers for the
 * rare shape this walk leaves to it. So this file never builds an error and never has to agree
 * with the Python one on messages; it only has to accept nothing that the Python walk refuses
 * and to read the same numbers where both accept (tests/wire/test_compiled_walk.py holds it to
 * that on drawn and garbage bodies).
 *
 * Every read is bounds-checked; positions are int64 so that lengths up to a five-byte varint's
 * 2**34 added to them cannot overflow. A varlong whose value needs more than 64 bits (which
 * Python's ints keep) is left to Python, as are buffers that are not plain contiguous bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* A record's fields, as records.py names them: int32 varints take at most 5 bytes, the
 * timestamp delta (an int64 varlong) at most 10. */
#define VARINT_BYTES 5
#define VARLONG_BYTES 10

/* The zigzag varint at *pos, at most max_bytes long; 0 and *pos moved past it, or -1 when the
 * buffer ends inside it, it does not end within max_bytes, or its value needs more than 64 bits. */
static inline int
read_zigzag(const uint8_t *body, int64_t size, int64_t *pos, int max_bytes, int64_t *out)
{
    int64_t p = *pos;
    uint64_t zigzag = 0;
    for (int i = 0; i < max_bytes; i++, p++) {
        if (p >= size)
            return -1;
        uint64_t byte = body[p];
        if (i == 9 && (byte & 0x7F) > 1)
            return -1; /* bits past 63: a Python int, not an int64 */
        zigzag |= (byte & 0x7F) << (7 * i);
        if (byte < 0x80) {
            *pos = p + 1;
            *out = (int64_t)(zigzag >> 1) ^ -(int64_t)(zigzag & 1);
            return 0;
        }
    }
    return -1;
}

/* Whether body[pos:pos+length] decodes as UTF-8 the way str(..., "utf-8") does: ASCII is
 * checked here, anything else by CPython's own strict decoder, so the two cannot differ. */
static int
is_utf8(const uint8_t *text, int64_t length)
{
    for (int64_t i = 0; i < length; i++) {
        if (text[i] >= 0x80) {
            PyObject *decoded = PyUnicode_DecodeUTF8((const char *)text, (Py_ssize_t)length, "strict");
            if (decoded == NULL) {
                PyErr_Clear();
                return 0;
            }
            Py_DECREF(decoded);
            return 1;
        }
    }
    return 1;
}

/* _skip_headers: the header count, then each key (UTF-8) and value skipped; -1 where the
 * Python walk would raise. */
static int
skip_headers(const uint8_t *body, int64_t size, int64_t *pos, int64_t end)
{
    int64_t count, name_length, value_length;
    if (read_zigzag(body, size, pos, VARINT_BYTES, &count) < 0)
        return -1;
    if (count < 0 || count * 2 > end - *pos)
        return -1;
    for (int64_t i = 0; i < count; i++) {
        if (read_zigzag(body, size, pos, VARINT_BYTES, &name_length) < 0 || name_length < 0)
            return -1;
        if (name_length > size - *pos) /* Python slices short, then runs off the end: a fault */
            return -1;
        if (!is_utf8(body + *pos, name_length))
            return -1;
        *pos += name_length;
        if (read_zigzag(body, size, pos, VARINT_BYTES, &value_length) < 0)
            return -1;
        if (value_length >= 0)
            *pos += value_length;
    }
    return 0;
}

typedef struct {
    int64_t first_bad, bad_delta, low, high, first_keyless;
} Summary;

/* _walk_records's loop: 0 with the summary filled in, or -1 for anything it would raise. */
static int
walk_body(const uint8_t *body, int64_t size, int64_t origin, int64_t count, Summary *out)
{
    int64_t pos = origin;
    int64_t length, timestamp_delta, offset_delta, key_length, value_length;
    Summary s = {-1, 0, INT64_MAX, INT64_MIN, -1};
    for (int64_t index = 0; index < count; index++) {
        if (read_zigzag(body, size, &pos, VARINT_BYTES, &length) < 0)
            return -1;
        int64_t end = pos + length;
        pos += 1; /* the record attributes byte, which Kafka leaves unused */
        if (read_zigzag(body, size, &pos, VARLONG_BYTES, &timestamp_delta) < 0)
            return -1;
        if (timestamp_delta < s.low)
            s.low = timestamp_delta;
        if (timestamp_delta > s.high)
            s.high = timestamp_delta;
        if (read_zigzag(body, size, &pos, VARINT_BYTES, &offset_delta) < 0)
            return -1;
        if (offset_delta != index && s.first_bad < 0) {
            s.first_bad = index;
            s.bad_delta = offset_delta;
        }
        if (read_zigzag(body, size, &pos, VARINT_BYTES, &key_length) < 0)
            return -1;
        if (key_length > 0)
            pos += key_length;
        else if (key_length < 0 && s.first_keyless < 0)
            s.first_keyless = index;
        if (read_zigzag(body, size, &pos, VARINT_BYTES, &value_length) < 0)
            return -1;
        if (value_length > 0)
            pos += value_length;
        if (pos >= size)
            return -1;
        if (body[pos] == 0)
            pos += 1;
        else if (skip_headers(body, size, &pos, end) < 0)
            return -1;
        if (pos != end)
            return -1;
    }
    if (pos != size)
        return -1;
    if (count == 0)
        s.low = s.high = 0;
    *out = s;
    return 0;
}

static PyObject *
walk(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "walk(body, origin, count) takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t origin = PyLong_AsSsize_t(args[1]);
    if (origin == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_ND | PyBUF_FORMAT) < 0) {
        PyErr_Clear(); /* strided or not a buffer: Python indexes it */
        Py_RETURN_NONE;
    }
    int plain = view.itemsize == 1 && view.ndim <= 1 && (view.format == NULL || strcmp(view.format, "B") == 0);
    Summary s;
    int walked = plain && origin >= 0 && origin <= view.len && count >= 0
                 && walk_body((const uint8_t *)view.buf, view.len, origin, count, &s) == 0;
    PyBuffer_Release(&view);
    if (!walked)
        Py_RETURN_NONE;
    return Py_BuildValue("(LLLLL)", (long long)s.first_bad, (long long)s.bad_delta, (long long)s.low,
                         (long long)s.high, (long long)s.first_keyless);
}

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL,
     "walk(body, origin, count) -> (bad_offset_index, bad_offset_delta, min_ts_delta, max_ts_delta, "
     "first_keyless) or None\n\n"
     "The walk of records.py's _walk_records over body[origin:], or None where that walk would "
     "raise (or the body is not plain bytes): the caller then runs the Python walk for its error."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "quorum.wire._walk",
    "The leader's record walk, compiled; quorum.wire.records._walk_records is its reference.", -1, methods,
};

PyMODINIT_FUNC
PyInit__walk(void)
{
    return PyModule_Create(&module_def);
}
