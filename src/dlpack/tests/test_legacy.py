"""pydlpack 0.2.1's names keep working, with a DeprecationWarning naming the new spelling
(docs/migration.md); everything they do goes through the 1.x readers and checks."""

import array
import ctypes
import gc
import subprocess
import sys
import warnings

import pytest

import dlpack
import dlpack.ctypes as dlc
from dlpack import DLDataTypeCode, DLDeviceType, asdlpack, todict
from dlpack.tests.helpers import lib


def deprecated(call, *words):
    """call() warns DeprecationWarning naming each of words; returns its result."""
    with pytest.warns(DeprecationWarning) as record:
        result = call()
    text = " ".join(str(w.message) for w in record)
    for word in words:
        assert word in text, text
    return result


@pytest.mark.parametrize("name", ["DLTensor", "DLManagedTensor", "DLManagedTensorVersioned",
                                  "DLDevice", "DLDataType", "DLPackVersion"])
def test_structures_moved_to_dlpack_ctypes(name):
    cls = deprecated(lambda: getattr(dlpack, name), f"dlpack.ctypes.{name}")
    assert cls is getattr(dlc, name)


def test_from_import_works():
    with pytest.warns(DeprecationWarning):
        from dlpack import Capsule, DLManagedTensor  # noqa: F401  (what 0.2.1's tests import)


class Multi(bytearray):
    """Speaks four protocols, each giving other bytes: the result names the protocol used."""

    def __dlpack__(self, **kwargs):
        return asdlpack(b"dl").__dlpack__(**kwargs)

    @property
    def __array_interface__(self):
        return {"shape": (2,), "typestr": "|u1", "data": b"ai", "version": 3}

    @property
    def __cuda_array_interface__(self):
        return {"shape": (0,), "typestr": "|u1", "data": (0, False), "version": 3}


@pytest.mark.parametrize("name, expect", [
    ("asdlpack_buffer", b"buf"),
    ("asdlpack_dlpack", b"dl"),
    ("asdlpack_array_interface_v3", b"ai"),
    ("asdlpack_cuda_array_interface", None),
])
def test_per_protocol_functions_force_their_protocol(name, expect):
    fn = getattr(dlpack, name)
    dl = deprecated(lambda: fn(Multi(b"buf")), f"dlpack.{name}(obj)", "dlpack.asdlpack(obj)")
    if expect is None:
        assert dl.device == (DLDeviceType.kDLCUDA, 0) and dl.size == 0
    else:
        assert bytes(memoryview(dl)) == expect
    assert bytes(memoryview(asdlpack(Multi(b"buf")))) == b"dl"


def test_per_protocol_functions_use_the_checked_readers():
    class Hostile:
        @property
        def __array_interface__(self):
            return {"shape": (2**62, 2**62), "typestr": "<f8", "data": (4096, False),
                    "version": 3}

    with pytest.warns(DeprecationWarning), pytest.raises(BufferError, match="overflows"):
        dlpack.asdlpack_array_interface_v3(Hostile())
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="buffer protocol"):
        dlpack.asdlpack_buffer(Hostile())
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="__dlpack__"):
        dlpack.asdlpack_dlpack(b"abc")

    class Raises:
        def __dlpack__(self, **kwargs):
            raise RuntimeError("no")

    with pytest.warns(DeprecationWarning), pytest.raises(BufferError, match="__dlpack__"):
        dlpack.asdlpack_dlpack(Raises())
    with pytest.warns(DeprecationWarning), pytest.raises(NotImplementedError, match="v3"):
        dlpack.asdlpack_array_interface_v2(Raises())


@pytest.mark.parametrize("name, protocol", [
    ("asdlpack_dlpack", "__dlpack__"),
    ("asdlpack_array_interface_v3", "__array_interface__"),
    ("asdlpack_cuda_array_interface", "__cuda_array_interface__"),
])
def test_per_protocol_functions_wrap_a_raising_property_as_asdlpack_does(name, protocol):
    """§7: the provider's own error comes back as BufferError "<protocol>: <type>: ..."."""
    def broken(self):
        raise RuntimeError("the property broke")

    Provider = type("Provider", (), {protocol: property(broken)})
    with pytest.raises(BufferError) as via_asdlpack:
        asdlpack(Provider())
    with pytest.warns(DeprecationWarning), pytest.raises(BufferError) as via_legacy:
        getattr(dlpack, name)(Provider())
    assert str(via_legacy.value) == str(via_asdlpack.value) == \
        f"{protocol}: RuntimeError: the property broke"
    assert isinstance(via_legacy.value.__cause__, RuntimeError)


def test_impl_cls_chooses_the_plain_capsule():
    a = array.array("d", [1.0, 2.0])
    legacy = deprecated(lambda: asdlpack(a, impl_cls=dlc.DLManagedTensor), "impl_cls",
                        "max_version")
    assert '"dltensor"' in repr(legacy.__dlpack__())
    versioned = deprecated(lambda: asdlpack(a, impl_cls=dlc.DLManagedTensorVersioned),
                           "impl_cls")
    assert '"dltensor_versioned"' in repr(versioned.__dlpack__())
    assert todict(versioned.__dlpack__())["version"] == dlpack.DLPACK_VERSION
    # A consumer's max_version still decides.
    assert '"dltensor"' in repr(versioned.__dlpack__(max_version=(0, 8)))
    assert '"dltensor_versioned"' in repr(legacy.__dlpack__(max_version=(1, 0)))
    # The object asdlpack was given is not changed: a second view carries the choice.
    plain = asdlpack(a)
    with pytest.warns(DeprecationWarning):
        again = asdlpack(plain, impl_cls=dlc.DLManagedTensorVersioned)
    assert again is not plain and '"dltensor"' in repr(plain.__dlpack__())
    assert again.data_ptr == plain.data_ptr
    with pytest.warns(DeprecationWarning):
        per_protocol = dlpack.asdlpack_buffer(a, impl_cls=dlc.DLManagedTensorVersioned)
    assert '"dltensor_versioned"' in repr(per_protocol.__dlpack__())
    with pytest.raises(TypeError, match="impl_cls"):
        asdlpack(a, impl_cls=object)


def test_impl_cls_versioned_with_real_consumers():
    np = lib("numpy")
    a = np.arange(6.0).reshape(2, 3)
    with pytest.warns(DeprecationWarning):
        dl = asdlpack(a, impl_cls=dlc.DLManagedTensorVersioned)
    b = np.from_dlpack(dl)
    assert b.ctypes.data == a.ctypes.data and (b == a).all()
    tf = lib("tensorflow")
    with pytest.raises(Exception, match="dltensor"):   # a legacy-only consumer is refused,
        tf.experimental.dlpack.from_dlpack(dl.__dlpack__())   # not handed a misread struct


def test_todict_dl_tensor_layout():
    b = bytearray(b"abcd")
    fields = todict(asdlpack(b).__dlpack__())
    nested = deprecated(lambda: fields["dl_tensor"], '["dl_tensor"]', "'shape'")
    assert nested == {
        "data": asdlpack(b).data_ptr, "device": {"device_type": "DLCPU", "device_id": 0},
        "ndim": 1, "dtype": {"code": "DLUInt", "bits": 8, "lanes": 1}, "shape": (4,),
        "strides": (1,), "byte_offset": 0}
    assert "dl_tensor" not in fields and fields["shape"] == (4,)
    assert fields == dict(fields)
    with pytest.raises(KeyError):
        fields["manager_ctx"]
    empty = todict(dlpack.from_address(None, (0,), "uint8", owner=None))
    with pytest.warns(DeprecationWarning):
        assert empty["dl_tensor"]["data"] is None        # 0.2.1 spelled NULL so


def test_enum_labels():
    assert deprecated(lambda: DLDeviceType.kDLCUDAManaged.label, ".name") == "DLCUDAManaged"
    assert deprecated(lambda: DLDeviceType.from_label("DLCPU"), "['kDL") is DLDeviceType.kDLCPU
    assert deprecated(lambda: DLDataTypeCode.kDLBfloat.label) == "DLBfloat"
    with pytest.warns(DeprecationWarning), pytest.raises(KeyError, match="DLCPU"):
        DLDeviceType.from_label("CPU")


def test_buffer():
    np = lib("numpy")
    a = np.array([[1, 2], [3, 4]], dtype=np.int32)
    with pytest.warns(DeprecationWarning):
        buf = dlpack.Buffer(a, flags=dlpack.buffer.PyBUF_RECORDS_RO)
    assert (buf.ndim, buf.shape, buf.strides, buf.itemsize) == (2, (2, 2), (8, 4), 4)
    assert buf.format == "i" and buf.pointer == a.ctypes.data
    with pytest.warns(DeprecationWarning):
        simple = dlpack.Buffer(b"abc")
    assert simple.shape is None and simple.format is None
    with pytest.warns(DeprecationWarning), pytest.raises(BufferError, match="read-only"):
        dlpack.Buffer(b"abc", flags=dlpack.buffer.PyBUF_RECORDS)


def test_capsule():
    o, o2 = object(), object()
    with pytest.warns(DeprecationWarning):
        c = dlpack.Capsule.new(id(o), "mycapsule")
    assert c.get_name() == "mycapsule" and c.is_valid("mycapsule") and not c.is_valid("x")
    assert c.get_pointer("mycapsule") == id(o)
    c.set_name(None)
    assert c.get_name() is None and c.is_valid(None)
    c.set_pointer(id(o2))
    assert c.get_pointer(None) == id(o2)
    assert c.get_context() is None
    c.set_context(id(o))
    assert c.get_context() == id(o)
    with pytest.raises(ValueError):
        c.get_pointer("wrong name")
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="PyCapsule"):
        dlpack.Capsule(object())


def test_capsule_destructor_runs_once_without_reviving_the_capsule():
    seen = []

    def destructor(capsule):
        seen.append((capsule.get_name(), capsule.is_valid("mine"), capsule.get_pointer("mine")))

    with pytest.warns(DeprecationWarning):
        c = dlpack.Capsule.new(1234, "mine", destructor)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # an exception in the callback would warn
        del c
        gc.collect()
    assert seen == [("mine", True, 1234)]
    assert not dlpack.Capsule._destructors


# Every public name pydlpack 0.2.1 had (its dlpack/__init__.py, buffer.py, capsule.py; not the
# modules it imported for itself: atexit, warnings, its private _version), by where it lived.
NAMES_0_2_1 = {
    "dlpack": [
        "__version__", "Buffer", "PyBUF_RECORDS_RO", "Capsule", "DLPACK_CAPSULE_VALID_NAME",
        "DLStructure", "DLDeviceType", "DLDataTypeCode", "DLDevice", "DLDataType", "DLTensor",
        "DLPackVersion", "DLManagedTensorVersioned", "DLManagedTensor", "MemoryManager",
        "DLManagedTensorImpl", "DLPackObject", "_get_strides", "asdlpack_array_interface_v3",
        "asdlpack_dlpack", "asdlpack_array_interface_v2", "asdlpack_cuda_array_interface",
        "asdlpack_buffer", "asdlpack", "todict", "buffer", "capsule"],
    "dlpack.buffer": [
        "Buffer", "Py_ssize_t", "Py_Buffer", "PyBUF_WRITABLE", "PyBUF_FORMAT", "PyBUF_SIMPLE",
        "PyBUF_ND", "PyBUF_STRIDES", "PyBUF_INDIRECT", "PyBUF_C_CONTIGUOUS",
        "PyBUF_F_CONTIGUOUS", "PyBUF_ANY_CONTIGUOUS", "PyBUF_FULL", "PyBUF_FULL_RO",
        "PyBUF_RECORDS", "PyBUF_RECORDS_RO", "PyBUF_STRIDED", "PyBUF_STRIDED_RO", "PyBUF_CONTIG",
        "PyBUF_CONTIG_RO"],
    "dlpack.capsule": ["Capsule", "PyCapsule", "PyCapsule_Destructor"],
}
ATTRIBUTES_0_2_1 = {        # the attributes of 0.2.1's kept classes' instances
    "DLPackObject": (lambda: asdlpack(b"ab"), ["impl", "__dlpack__", "__dlpack_device__"]),
    "Buffer": (lambda: dlpack.Buffer(b"ab"), ["py_buffer", "ndim", "shape", "strides",
                                              "suboffsets", "itemsize", "pointer", "format"]),
    "Capsule": (lambda: dlpack.Capsule(asdlpack(b"ab").__dlpack__()),
                ["capsule", "new", "is_valid", "get_pointer", "set_pointer", "get_name",
                 "set_name", "get_context", "set_context", "get_destructor",
                 "set_destructor"]),
    "DLStructure": (lambda: dlc.DLTensor(), ["todict"]),      # each structure's base
    "DLDeviceType": (lambda: DLDeviceType.kDLCPU, ["label", "from_label", "value"]),
    "DLDataTypeCode": (lambda: DLDataTypeCode.kDLFloat, ["label", "from_label", "value"]),
}


def names_the_way_out(e, where):
    text = str(e)
    assert where in text and "docs/migration.md" in text and "use " in text, text


@pytest.mark.parametrize("module", sorted(NAMES_0_2_1))
def test_every_0_2_1_name_works_or_says_where_it_went(module):
    """Each of 0.2.1's module names is there (deprecated or not), or is gone with an
    AttributeError, and a from-import with an ImportError, naming the way out and
    docs/migration.md."""
    import importlib

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        mod = importlib.import_module(module)
        gone = []
        for name in NAMES_0_2_1[module]:
            try:
                getattr(mod, name)
            except AttributeError as e:
                names_the_way_out(e, f"{module}.{name}")
                assert not hasattr(mod, name)
                gone.append(name)
                with pytest.raises(ImportError) as imported:
                    exec(f"from {module} import {name}", {})
                names_the_way_out(imported.value, f"{module}.{name}")
                assert not isinstance(imported.value, AttributeError)
            else:
                exec(f"from {module} import {name}", {})
    assert gone == {"dlpack": ["DLStructure", "MemoryManager", "DLManagedTensorImpl"],
                    "dlpack.buffer": ["Py_Buffer"], "dlpack.capsule": []}[module]


@pytest.mark.parametrize("owner", sorted(ATTRIBUTES_0_2_1))
def test_every_0_2_1_attribute_works_or_says_where_it_went(owner):
    make, names = ATTRIBUTES_0_2_1[owner]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        obj = make()
        gone = []
        for name in names:
            try:
                getattr(obj, name)
            except AttributeError as e:
                names_the_way_out(e, f"{owner}.{name}")
                assert not hasattr(obj, name)
                gone.append(name)
    assert gone == {"DLPackObject": ["impl"], "Buffer": ["py_buffer"],
                    "DLStructure": ["todict"]}.get(owner, [])


def test_other_missing_names_keep_pythons_errors():
    dl = asdlpack(b"ab")
    with pytest.raises(AttributeError, match="no attribute 'nonsense'") as e:
        dl.nonsense  # noqa: B018
    assert e.value.name == "nonsense" and e.value.obj is dl
    with pytest.raises(AttributeError, match="module 'dlpack' has no attribute 'nonsense'"):
        dlpack.nonsense  # noqa: B018
    with pytest.raises(ImportError, match="cannot import name 'nonsense'"):
        exec("from dlpack import nonsense", {})
    with pytest.raises(AttributeError, match="'DLTensor' object has no attribute 'nonsense'"):
        dlc.DLTensor().nonsense  # noqa: B018
    with pytest.warns(DeprecationWarning):
        buffer = dlpack.Buffer(b"ab")
    with pytest.raises(AttributeError, match="'Buffer' object has no attribute 'nonsense'"):
        buffer.nonsense  # noqa: B018


def test_constants_and_helpers():
    assert deprecated(lambda: dlpack.DLPACK_CAPSULE_VALID_NAME) == b"dltensor"
    assert deprecated(lambda: dlpack.PyBUF_RECORDS_RO) == 0x1C
    assert deprecated(lambda: dlpack._get_strides((4, 6, 5))) == (30, 5, 1)
    assert ctypes.sizeof(deprecated(lambda: dlpack.DLTensor)) == ctypes.sizeof(dlc.DLTensor)


def test_capsule_names_are_kept_as_exact_bytes():
    """§7: the table of capsule names (a capsule keeps only the char *) holds no user object:
    a bytes subclass equal to every name cannot stand in for another."""
    from dlpack import _legacy

    class Liar(bytes):
        def __bytes__(self):
            return self

        def __hash__(self):
            return hash(b"dltensor")

        def __eq__(self, other):
            return True

    got = _legacy._name(Liar(b"someone else's"))
    assert type(got) is bytes and got == b"someone else's"
    again = _legacy._name(b"dltensor")
    assert type(again) is bytes and bytes.__eq__(again, b"dltensor")
    assert all(type(k) is bytes for k in _legacy._NAMES)


def warned_here(call):
    """call() warns DeprecationWarning, every one of them at the line here that called it (the
    user's line, never a line of pydlpack)."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            call()
        except (TypeError, NotImplementedError):
            pass
    found = [(w.filename, w.lineno, str(w.message)) for w in record
             if issubclass(w.category, DeprecationWarning)]
    assert found and all(f == __file__ for f, _, _ in found), found


@pytest.mark.parametrize("call", [
    lambda: dlpack.Buffer(b"abc"),
    lambda: dlpack.asdlpack_array_interface_v2(1),
    lambda: dlpack.asdlpack_buffer(b"abc"),
    lambda: dlpack.Capsule(object()),
    lambda: dlpack.Capsule.new(id(dlpack), "x"),
    lambda: asdlpack(b"abc", dlc.DLManagedTensor),
    lambda: asdlpack(b"abc", impl_cls=dlc.DLManagedTensorVersioned),
    lambda: dlpack._get_strides((2, 3)),
    lambda: todict(asdlpack(b"abc"))["dl_tensor"],
    lambda: DLDeviceType.from_label("DLCPU"),
    lambda: DLDataTypeCode.kDLBfloat.label,
    lambda: dlpack.DLTensor,
    lambda: dlpack.PyBUF_RECORDS_RO,
], ids=["Buffer", "v2", "asdlpack_buffer", "Capsule", "Capsule.new", "impl_cls-positional",
        "impl_cls-keyword", "_get_strides", "dl_tensor", "from_label", "label", "DLTensor",
        "PyBUF"])
def test_deprecation_warnings_point_at_the_callers_line(call):
    warned_here(call)


def test_impl_cls_positional_as_in_0_2_1():
    """0.2.1's signature was asdlpack(obj, impl_cls=None): its positional call still works."""
    with pytest.warns(DeprecationWarning, match="impl_cls"):
        dl = asdlpack(b"abc", dlc.DLManagedTensorVersioned)
    assert dl.__dlpack__().__class__.__name__ == "PyCapsule"
    assert todict(dl.__dlpack__())["version"] is not None


def test_0_2_1_modules_import(tmp_path):
    """``import dlpack.buffer`` and ``from dlpack.capsule import Capsule`` (0.2.1's modules)
    work, warning once each at the importing line; their public names are there."""
    user = tmp_path / "user.py"
    user.write_text("import warnings\nwarnings.simplefilter('always')\n"
                    "import dlpack.buffer\n"
                    "from dlpack.capsule import Capsule, PyCapsule, PyCapsule_Destructor\n"
                    "from dlpack.buffer import Buffer, PyBUF_RECORDS_RO, Py_ssize_t\n"
                    "assert dlpack.buffer.__all__ == ['Buffer'] and Buffer is dlpack.Buffer\n"
                    "assert Capsule is dlpack.Capsule and PyBUF_RECORDS_RO == 0x1C\n"
                    "import dlpack.capsule\n")
    run = subprocess.run([sys.executable, str(user)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert f"{user}:3: DeprecationWarning: the module dlpack.buffer" in run.stderr, run.stderr
    assert f"{user}:4: DeprecationWarning: the module dlpack.capsule" in run.stderr
    assert run.stderr.count("DeprecationWarning") == 2, run.stderr


def test_submodules_are_attributes_of_the_package():
    """``dlpack.ctypes`` and the other submodules work without importing them first."""
    code = ("import dlpack, sys\n"
            "assert 'dlpack.ctypes' not in sys.modules\n"
            "assert dlpack.ctypes.DLTensor and dlpack.tools.__name__ and dlpack.tests.run\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    assert dlpack.ctypes.__all__ and set(dlpack.ctypes.__all__) <= set(dir(dlpack.ctypes))
    assert not {"Any", "annotations", "ctypes", "warnings"} & set(dlpack.ctypes.__all__)
