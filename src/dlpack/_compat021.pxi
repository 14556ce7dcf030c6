# pydlpack 0.2.1's API (deprecated; docs/migration.md), on the current core: asdlpack's impl_cls,
# which makes a plain __dlpack__() give a versioned capsule, and the per-protocol functions of
# dlpack._legacy, each one step of the walk with the same reader and checks.


# The protocols 0.2.1 had a function for.
cdef tuple _VIA = ("__dlpack__", "buffer protocol", "__array_interface__",
                   "__cuda_array_interface__")


cdef DLPackObject _asdlpack_impl_cls(object obj, object impl_cls, bint allow_legacy_readonly,
                                     bint legacy_writable, object cuda_pickle):
    """asdlpack(obj, impl_cls): asdlpack(obj) whose plain __dlpack__() gives the capsule kind
    impl_cls names."""
    from dlpack import _legacy
    return _plain_kind(asdlpack(obj, allow_legacy_readonly=allow_legacy_readonly,
                                legacy_writable=legacy_writable, cuda_pickle=cuda_pickle),
                       _legacy.impl_cls_versioned(impl_cls, "asdlpack(obj, impl_cls=...)"))


cdef DLPackObject _plain_kind(DLPackObject r, bint versioned):
    """r, or a second view of its memory, whose plain __dlpack__() gives the capsule kind asked."""
    if r._plain_versioned != versioned:
        r = _share(r, r._legacy_readonly, False, False)
        _set_plain_kind(r, versioned)
    return r


def _asdlpack_via(obj, str protocol, bint versioned=False):
    """asdlpack through ``protocol`` alone: its step of the walk, with the same test, reader and
    checks (pydlpack 0.2.1's per-protocol functions, dlpack._legacy); ``versioned`` as 0.2.1's
    impl_cls asked."""
    cdef DLPackObject r
    cdef const _Step *s = _step_named(protocol) if protocol in _VIA else NULL
    if s == NULL:
        raise ValueError(f"_asdlpack_via: unknown protocol {protocol!r}")
    cdef int arrow = -1
    try:            # a provider's raising property is wrapped as asdlpack wraps it (§7)
        value = s.present(obj, type(obj), &arrow, protocol)
    except MemoryError:
        raise
    except Exception as e:
        raise _as_refusal(protocol, e)
    if value is _MISSING:
        raise TypeError(f"{protocol}: {type(obj).__module__}.{type(obj).__qualname__} object "
                        f"does not speak it; dlpack.asdlpack(obj) tries every protocol")
    try:
        r = s.read(obj, value)
    except MemoryError:
        raise
    except Exception as e:
        raise _as_refusal(protocol, e)
    _set_plain_kind(r, versioned)
    return r
