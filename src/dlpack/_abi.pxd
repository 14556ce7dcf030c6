# The DLPack C ABI, taken from the vendored dlpack.h (v1.3, include/dlpack/dlpack.h), NumPy's
# PyArrayInterface struct and the Arrow C data, stream and device interfaces, as Cython
# declarations.
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


# The Arrow C data interface, C stream interface and C device data interface (format/
# CDataInterface.rst, CStreamInterface.rst, CDeviceDataInterface.rst), under their canonical
# guards so that a header of another project defining them too does not clash.
cdef extern from *:
    """
    #ifndef ARROW_C_DATA_INTERFACE
    #define ARROW_C_DATA_INTERFACE
    #define ARROW_FLAG_DICTIONARY_ORDERED 1
    #define ARROW_FLAG_NULLABLE 2
    #define ARROW_FLAG_MAP_KEYS_SORTED 4
    struct ArrowSchema {
      const char* format;
      const char* name;
      const char* metadata;
      int64_t flags;
      int64_t n_children;
      struct ArrowSchema** children;
      struct ArrowSchema* dictionary;
      void (*release)(struct ArrowSchema*);
      void* private_data;
    };
    struct ArrowArray {
      int64_t length;
      int64_t null_count;
      int64_t offset;
      int64_t n_buffers;
      int64_t n_children;
      const void** buffers;
      struct ArrowArray** children;
      struct ArrowArray* dictionary;
      void (*release)(struct ArrowArray*);
      void* private_data;
    };
    #endif
    #ifndef ARROW_C_STREAM_INTERFACE
    #define ARROW_C_STREAM_INTERFACE
    struct ArrowArrayStream {
      int (*get_schema)(struct ArrowArrayStream*, struct ArrowSchema* out);
      int (*get_next)(struct ArrowArrayStream*, struct ArrowArray* out);
      const char* (*get_last_error)(struct ArrowArrayStream*);
      void (*release)(struct ArrowArrayStream*);
      void* private_data;
    };
    #endif
    #ifndef ARROW_C_DEVICE_DATA_INTERFACE
    #define ARROW_C_DEVICE_DATA_INTERFACE
    typedef int32_t ArrowDeviceType;
    #define ARROW_DEVICE_CPU 1
    #define ARROW_DEVICE_CUDA 2
    #define ARROW_DEVICE_CUDA_HOST 3
    #define ARROW_DEVICE_OPENCL 4
    #define ARROW_DEVICE_VULKAN 7
    #define ARROW_DEVICE_METAL 8
    #define ARROW_DEVICE_VPI 9
    #define ARROW_DEVICE_ROCM 10
    #define ARROW_DEVICE_ROCM_HOST 11
    #define ARROW_DEVICE_EXT_DEV 12
    #define ARROW_DEVICE_CUDA_MANAGED 13
    #define ARROW_DEVICE_ONEAPI 14
    #define ARROW_DEVICE_WEBGPU 15
    #define ARROW_DEVICE_HEXAGON 16
    struct ArrowDeviceArray {
      struct ArrowArray array;
      int64_t device_id;
      ArrowDeviceType device_type;
      void* sync_event;
      int64_t reserved[3];
    };
    #endif
    #ifndef ARROW_C_DEVICE_STREAM_INTERFACE
    #define ARROW_C_DEVICE_STREAM_INTERFACE
    struct ArrowDeviceArrayStream {
      ArrowDeviceType device_type;
      int (*get_schema)(struct ArrowDeviceArrayStream*, struct ArrowSchema*);
      int (*get_next)(struct ArrowDeviceArrayStream*, struct ArrowDeviceArray*);
      const char* (*get_last_error)(struct ArrowDeviceArrayStream*);
      void (*release)(struct ArrowDeviceArrayStream*);
      void* private_data;
    };
    #endif
    """
    enum:
        ARROW_FLAG_NULLABLE
        ARROW_DEVICE_CPU
        ARROW_DEVICE_CUDA
        ARROW_DEVICE_CUDA_HOST
        ARROW_DEVICE_CUDA_MANAGED
    struct ArrowSchema:
        const char *format
        const char *name
        const char *metadata
        int64_t flags
        int64_t n_children
        ArrowSchema **children
        ArrowSchema *dictionary
        void (*release)(ArrowSchema *) noexcept nogil
        void *private_data
    struct ArrowArray:
        int64_t length
        int64_t null_count
        int64_t offset
        int64_t n_buffers
        int64_t n_children
        const void **buffers
        ArrowArray **children
        ArrowArray *dictionary
        void (*release)(ArrowArray *) noexcept nogil
        void *private_data
    struct ArrowArrayStream:
        int (*get_schema)(ArrowArrayStream *, ArrowSchema *) noexcept nogil
        int (*get_next)(ArrowArrayStream *, ArrowArray *) noexcept nogil
        const char *(*get_last_error)(ArrowArrayStream *) noexcept nogil
        void (*release)(ArrowArrayStream *) noexcept nogil
        void *private_data
    struct ArrowDeviceArray:
        ArrowArray array
        int64_t device_id
        int32_t device_type
        void *sync_event
        int64_t reserved[3]
    struct ArrowDeviceArrayStream:
        int32_t device_type
        int (*get_schema)(ArrowDeviceArrayStream *, ArrowSchema *) noexcept nogil
        int (*get_next)(ArrowDeviceArrayStream *, ArrowDeviceArray *) noexcept nogil
        const char *(*get_last_error)(ArrowDeviceArrayStream *) noexcept nogil
        void (*release)(ArrowDeviceArrayStream *) noexcept nogil
        void *private_data
