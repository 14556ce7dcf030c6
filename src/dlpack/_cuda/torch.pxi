# torch's rules the readers and writers share (the rest: _readers/torch.pxi): its current-device
# rule, and torch.Tensor's __dlpack_c_exchange_api__, once _readers/torch.pxi found it usable:
# the reader's fast path calls it, and a CUDA export asks whether an object's work API is
# torch's.

cdef DLPackExchangeAPI *_torch_api = NULL
cdef object _torch_api_capsule = None       # keeps the API struct alive


cdef int _torch_current_device(DLPackObject self) except -1:
    """torch's own __dlpack__ refuses CUDA tensors off the current device; so do the reader's
    fast path (_readers/torch.pxi) and exports of tensors taken through its C exchange API (§4: a
    fast path refuses what the producer does)."""
    current = sys.modules["torch"].cuda.current_device()
    if current != self.desc.dl.device.device_id:
        raise Refusal(f"__dlpack__: torch refuses to export tensors on a different CUDA "
                      f"device index (tensor on cuda:{self.desc.dl.device.device_id}, current "
                      f"device cuda:{current}); call torch.cuda.set_device("
                      f"{self.desc.dl.device.device_id}) first")
    return 0
