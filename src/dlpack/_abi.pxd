# The DLPack C ABI (v1.3) and the PyArrayInterface struct, as Cython declarations.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from *:
    """
    #include <stdint.h>
    typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
    typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
    typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
    typedef struct {
        void *data; DLDevice device; int32_t ndim; DLDataType dtype;
        int64_t *shape; int64_t *strides; uint64_t byte_offset;
    } DLTensor;
    typedef struct DLManagedTensor {
        DLTensor dl_tensor; void *manager_ctx; void (*deleter)(struct DLManagedTensor *);
    } DLManagedTensor;
    typedef struct DLManagedTensorVersioned {
        DLPackVersion version; void *manager_ctx;
        void (*deleter)(struct DLManagedTensorVersioned *);
        uint64_t flags; DLTensor dl_tensor;
    } DLManagedTensorVersioned;
    typedef void (*DLPackSetError)(void *, const char *, const char *);
    typedef struct DLPackExchangeAPIHeader {
        DLPackVersion version; struct DLPackExchangeAPIHeader *prev_api;
    } DLPackExchangeAPIHeader;
    typedef struct {
        DLPackExchangeAPIHeader header;
        int (*managed_tensor_allocator)(DLTensor *, DLManagedTensorVersioned **, void *,
                                        DLPackSetError);
        int (*managed_tensor_from_py_object_no_sync)(void *, DLManagedTensorVersioned **);
        int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *, void **);
        int (*dltensor_from_py_object_no_sync)(void *, DLTensor *);
        int (*current_work_stream)(int32_t, int32_t, void **);
    } DLPackExchangeAPI;
    typedef struct {
        int two; int nd; char typekind; int itemsize; int flags;
        Py_intptr_t *shape; Py_intptr_t *strides; void *data; PyObject *descr;
    } PyArrayInterface;
    """
    ctypedef struct DLPackVersion:
        uint32_t major
        uint32_t minor
    ctypedef struct DLDevice:
        int32_t device_type
        int32_t device_id
    ctypedef struct DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct DLTensor:
        void *data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t *shape
        int64_t *strides
        uint64_t byte_offset
    ctypedef struct DLManagedTensor:
        DLTensor dl_tensor
        void *manager_ctx
        void (*deleter)(DLManagedTensor *) noexcept nogil
    ctypedef struct DLManagedTensorVersioned:
        DLPackVersion version
        void *manager_ctx
        void (*deleter)(DLManagedTensorVersioned *) noexcept nogil
        uint64_t flags
        DLTensor dl_tensor
    ctypedef void (*DLPackSetError)(void *, const char *, const char *) noexcept nogil
    ctypedef struct DLPackExchangeAPIHeader:
        DLPackVersion version
        DLPackExchangeAPIHeader *prev_api
    ctypedef struct DLPackExchangeAPI:
        DLPackExchangeAPIHeader header
        int (*managed_tensor_allocator)(DLTensor *, DLManagedTensorVersioned **, void *,
                                        DLPackSetError) noexcept
        int (*managed_tensor_from_py_object_no_sync)(void *, DLManagedTensorVersioned **) except -1
        int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *, void **) except -1
        int (*dltensor_from_py_object_no_sync)(void *, DLTensor *) except -1
        int (*current_work_stream)(int32_t, int32_t, void **) noexcept
    ctypedef struct PyArrayInterface:
        int two
        int nd
        char typekind
        int itemsize
        int flags
        Py_ssize_t *shape
        Py_ssize_t *strides
        void *data
        void *descr

cdef enum:
    DLPACK_MAJOR = 1
    DLPACK_MINOR = 3
    FLAG_READ_ONLY = 1
    FLAG_IS_COPIED = 2
    FLAG_SUBBYTE_PADDED = 4

cdef enum:
    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLROCM = 10
    kDLROCMHost = 11
    kDLCUDAManaged = 13

cdef enum:
    kDLInt = 0
    kDLUInt = 1
    kDLFloat = 2
    kDLBfloat = 4
    kDLComplex = 5
    kDLBool = 6
