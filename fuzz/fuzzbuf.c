/* fuzzbuf: the buffer exporter the PEP 3118 harness needs, and buffer addresses.
 *
 * Exporter(size, offset, format, itemsize, shape, strides, suboffsets, readonly) owns `size`
 * bytes of its own malloc'd memory (so AddressSanitizer knows their bounds) and hands out a
 * Py_buffer with exactly the fields it was given: a format no `struct` code accepts, an item
 * size that disagrees with it, strides and suboffsets of any value. `address` is where its
 * memory starts; `buf` = address + offset. address_of(obj) gives (buf, len) of any
 * C-contiguous exporter (bytes, bytearray, PickleBuffer).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    char *mem;
    Py_ssize_t size, offset, itemsize, len;
    int ndim, readonly, exports;
    char *format;                   /* NULL: no format */
    Py_ssize_t *shape, *strides, *suboffsets;
} Exporter;

static int read_dims(PyObject *seq, Py_ssize_t n, Py_ssize_t **out, const char *what) {
    *out = NULL;
    if (seq == Py_None)
        return 0;
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "%s: a tuple of ndim ints", what);
        return -1;
    }
    *out = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    if (*out == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        (*out)[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(seq, i));
        if ((*out)[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

static int Exporter_init(Exporter *self, PyObject *args, PyObject *kw) {
    PyObject *format, *shape, *strides, *suboffsets;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "nnOnOOOp", &self->size, &self->offset, &format,
                          &self->itemsize, &shape, &strides, &suboffsets, &self->readonly))
        return -1;
    if (self->mem != NULL || self->size < 0 || self->offset < 0 || self->offset > self->size) {
        PyErr_SetString(PyExc_ValueError, "size/offset");
        return -1;
    }
    if (!PyTuple_Check(shape)) {
        PyErr_SetString(PyExc_ValueError, "shape: a tuple");
        return -1;
    }
    n = PyTuple_GET_SIZE(shape);
    self->ndim = (int)n;
    if (read_dims(shape, n, &self->shape, "shape") || read_dims(strides, n, &self->strides,
            "strides") || read_dims(suboffsets, n, &self->suboffsets, "suboffsets"))
        return -1;
    self->len = self->itemsize;
    for (Py_ssize_t i = 0; i < n; i++)
        if (__builtin_mul_overflow(self->len, self->shape[i], &self->len))
            self->len = PY_SSIZE_T_MAX;
    if (format != Py_None) {
        char *f;
        Py_ssize_t flen;
        if (PyBytes_AsStringAndSize(format, &f, &flen))
            return -1;
        self->format = PyMem_Malloc(flen + 1);
        if (self->format == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(self->format, f, flen + 1);
    }
    self->mem = malloc(self->size ? self->size : 1);
    if (self->mem == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(self->mem, 0x5a, self->size);
    return 0;
}

static void Exporter_dealloc(Exporter *self) {
    free(self->mem);
    PyMem_Free(self->format);
    PyMem_Free(self->shape);
    PyMem_Free(self->strides);
    PyMem_Free(self->suboffsets);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Exporter_getbuffer(Exporter *self, Py_buffer *view, int flags) {
    if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && self->readonly) {
        PyErr_SetString(PyExc_BufferError, "read-only");
        return -1;
    }
    if (self->strides != NULL && (flags & PyBUF_STRIDES) != PyBUF_STRIDES) {
        PyErr_SetString(PyExc_BufferError, "strided: ask for strides");
        return -1;
    }
    if (self->suboffsets != NULL && (flags & PyBUF_INDIRECT) != PyBUF_INDIRECT) {
        PyErr_SetString(PyExc_BufferError, "indirect: ask for suboffsets");
        return -1;
    }
    view->buf = self->mem + self->offset;
    view->obj = Py_NewRef(self);
    view->len = self->len;
    view->readonly = self->readonly;
    view->itemsize = self->itemsize;
    view->format = (flags & PyBUF_FORMAT) ? self->format : NULL;
    view->ndim = self->ndim;
    view->shape = (flags & PyBUF_ND) == PyBUF_ND ? self->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
    view->suboffsets = self->suboffsets;
    view->internal = NULL;
    self->exports++;
    return 0;
}

static void Exporter_releasebuffer(Exporter *self, Py_buffer *view) {
    self->exports--;
}

static PyObject *Exporter_address(Exporter *self, void *closure) {
    return PyLong_FromVoidPtr(self->mem);
}

static PyObject *Exporter_exports(Exporter *self, void *closure) {
    return PyLong_FromLong(self->exports);
}

static PyGetSetDef Exporter_getset[] = {
    {"address", (getter)Exporter_address, NULL, "where the memory starts", NULL},
    {"exports", (getter)Exporter_exports, NULL, "buffers handed out, not released", NULL},
    {NULL},
};

static PyBufferProcs Exporter_as_buffer = {
    (getbufferproc)Exporter_getbuffer, (releasebufferproc)Exporter_releasebuffer};

static PyTypeObject ExporterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fuzzbuf.Exporter",
    .tp_basicsize = sizeof(Exporter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Exporter_init,
    .tp_dealloc = (destructor)Exporter_dealloc,
    .tp_as_buffer = &Exporter_as_buffer,
    .tp_getset = Exporter_getset,
};

static PyObject *address_of(PyObject *mod, PyObject *obj) {
    Py_buffer v;
    PyObject *out;
    if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE))
        return NULL;
    out = Py_BuildValue("(Nn)", PyLong_FromVoidPtr(v.buf), v.len);
    PyBuffer_Release(&v);
    return out;
}

static PyMethodDef methods[] = {
    {"address_of", address_of, METH_O, "(buf, len) of a C-contiguous buffer exporter"},
    {NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "fuzzbuf", NULL, -1, methods};

PyMODINIT_FUNC PyInit_fuzzbuf(void) {
    PyObject *m;
    if (PyType_Ready(&ExporterType) < 0)
        return NULL;
    m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Exporter", (PyObject *)&ExporterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
