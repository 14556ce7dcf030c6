# Declarations every included file shares: the cimports and the C functions and macros they
# call. A .pxi declares nothing another file uses; C helpers private to one file (an
# `extern from *` block with its code) stay in that file.

cimport cython
from cpython.buffer cimport (
    PyBUF_ANY_CONTIGUOUS, PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_FORMAT, PyBUF_ND,
    PyBUF_FULL_RO, PyBUF_SIMPLE, PyBUF_STRIDES, PyBUF_WRITABLE, PyBuffer_Release,
    PyObject_CheckBuffer, PyObject_GetBuffer,
)
from cpython.dict cimport PyDict_GetItem, PyDict_Next
from cpython.exc cimport PyErr_Occurred, PyErr_WriteUnraisable
from cpython.list cimport PyList_AsTuple, PyList_Check, PyList_GET_SIZE, PyList_GetSlice
from cpython.number cimport PyNumber_Index
from cpython.pycapsule cimport (
    PyCapsule_CheckExact, PyCapsule_Destructor, PyCapsule_GetName, PyCapsule_GetPointer,
    PyCapsule_IsValid, PyCapsule_New, PyCapsule_SetName,
)
from cpython.pythread cimport (
    WAIT_LOCK, PyThread_acquire_lock, PyThread_allocate_lock, PyThread_get_thread_ident,
    PyThread_release_lock, PyThread_type_lock,
)
from cpython.ref cimport Py_INCREF, PyObject
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_SIZE, PyTuple_GetSlice
from libc.errno cimport EINVAL, ENOMEM
from libc.stdint cimport (
    INT32_MAX, INT64_MAX, int32_t, int64_t, uint8_t, uint16_t, uint64_t, uintptr_t,
)
from libc.stdio cimport snprintf
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcmp, memcpy, memset, strcmp
from posix.dlfcn cimport RTLD_LOCAL, RTLD_NOW, dlerror, dlopen, dlsym
from posix.stdlib cimport posix_memalign

from dlpack._abi cimport *

import ctypes as _ctypes
import pickle as _pickle
import struct as _struct
import sys
import threading as _threading
from collections.abc import Mapping as _Mapping

from dlpack import _types
from dlpack._deprecated import missing_attribute as _missing_attribute
from dlpack._types import DLDeviceType
from dlpack._types import DLPackError as Refusal   # pydlpack's own refusals (spec §7)
from dlpack._types import PACKED_WAY_OUT as _PACKED_WAY_OUT

cdef extern from "Python.h":
    enum:
        Py_TPFLAGS_HEAPTYPE
    void _decref_held "Py_DecRef"(PyObject *) nogil     # only called with the GIL held
    void PyErr_Fetch(PyObject **, PyObject **, PyObject **)
    void PyErr_Restore(PyObject *, PyObject *, PyObject *)
    # PyCapsule_GetPointer without Cython's error check: only called on a name just validated
    void *_capsule_pointer "PyCapsule_GetPointer"(object, const char *) noexcept
    const char *_capsule_name "PyCapsule_GetName"(object) noexcept   # our capsules: valid
    PyObject *_PyType_Lookup(type t, object name)     # borrowed, never raises
    object PyObject_Vectorcall(object, PyObject **, size_t, PyObject *)
    int PyErr_CheckSignals() except -1
    int _run_signal_handlers "PyErr_CheckSignals"() noexcept nogil   # the GIL held, unknown
    ctypedef struct PyThreadState:                                   # to Cython (see _tick)
        pass
    PyThreadState *PyEval_SaveThread() nogil
    void PyEval_RestoreThread(PyThreadState *) nogil
    char *PyBytes_AS_STRING(object)
    Py_ssize_t PyBytes_GET_SIZE(object)

cdef enum:                          # NumPy's array flags (ndarray.flags, PyArrayInterface.flags)
    NPY_C_CONTIGUOUS = 0x1
    NPY_F_CONTIGUOUS = 0x2
    NPY_ALIGNED = 0x100
    NPY_NOTSWAPPED = 0x200
    NPY_WRITEABLE = 0x400

cdef extern from "string.h":
    size_t strnlen(const char *, size_t) nogil

cdef extern from *:
    """
    static inline int dlpk_mul(int64_t a, int64_t b, int64_t *out) {
        return __builtin_mul_overflow(a, b, out);
    }
    static inline int dlpk_add(int64_t a, int64_t b, int64_t *out) {
        return __builtin_add_overflow(a, b, out);
    }
    static inline int dlpk_sub(int64_t a, int64_t b, int64_t *out) {
        return __builtin_sub_overflow(a, b, out);
    }
    """
    bint _mul_ovf "dlpk_mul"(int64_t a, int64_t b, int64_t *out) noexcept nogil
    bint _add_ovf "dlpk_add"(int64_t a, int64_t b, int64_t *out) noexcept nogil
    bint _sub_ovf "dlpk_sub"(int64_t a, int64_t b, int64_t *out) noexcept nogil
