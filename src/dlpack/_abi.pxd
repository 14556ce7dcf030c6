# The DLPack C ABI, taken from the vendored dlpack.h (v1.3, include/dlpack/dlpack.h), and
# NumPy's PyArrayInterface struct, as Cython declarations.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from *:
    """
    typedef void (*DLPackSetError)(void *, const char *, const char *);
    """
    # the error callback of DLPackExchangeAPI.managed_tensor_allocator (unnamed in dlpack.h)
    ctypedef void (*DLPackSetError)(void *, const char *, const char *) noexcept nogil

cdef extern from "dlpack/dlpack.h":
    enum:
        DLPACK_MAJOR "DLPACK_MAJOR_VERSION"
        DLPACK_MINOR "DLPACK_MINOR_VERSION"
    enum:
        FLAG_READ_ONLY "DLPACK_FLAG_BITMASK_READ_ONLY"
        FLAG_IS_COPIED "DLPACK_FLAG_BITMASK_IS_COPIED"
        FLAG_SUBBYTE_PADDED "DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED"
    ctypedef enum c_DLDeviceType "DLDeviceType":
        kDLCPU
        kDLCUDA
        kDLCUDAHost
        kDLROCM
        kDLROCMHost
        kDLCUDAManaged
    ctypedef enum c_DLDataTypeCode "DLDataTypeCode":
        kDLInt
        kDLUInt
        kDLFloat
        kDLBfloat
        kDLComplex
        kDLBool
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
        int (*current_work_stream)(c_DLDeviceType, int32_t, void **) noexcept

cdef extern from *:
    """
    typedef struct {
        int two; int nd; char typekind; int itemsize; int flags;
        Py_intptr_t *shape; Py_intptr_t *strides; void *data; PyObject *descr;
    } PyArrayInterface;
    """
    ctypedef struct PyArrayInterface:
        int two
        int nd
        char typekind
        int itemsize
        int flags
        Py_ssize_t *shape
        Py_ssize_t *strides
        void *data
