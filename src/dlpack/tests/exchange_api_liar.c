/* A broken producer's exchange-API entry point, for test_writer_exchange_api.py: it sets a Python
   error and yet returns 0 (success), with the tensor the test stashed. Python's C API is
   declared, not included: the symbols resolve in the interpreter that loads the library. */
typedef struct _object PyObject;
extern PyObject *PyExc_RuntimeError;
void PyErr_SetString(PyObject *, const char *);

void *stashed;

int error_left_on_success(void *obj, void **out) {
    (void)obj;
    PyErr_SetString(PyExc_RuntimeError, "an error left set by a call that returned 0");
    *out = stashed;
    stashed = 0;
    return 0;
}
