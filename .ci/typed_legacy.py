"""pydlpack 0.2.1 code, type-checked by CI with `mypy --strict --enable-error-code deprecated`: it
must type-check except for one [deprecated] error per deprecated use (the stubs give the
deprecated names their real signatures), five in all."""

import dlpack
import dlpack.ctypes as dlc

buf = dlpack.Buffer(b"abc")
ndim: int = buf.ndim
dl = dlpack.asdlpack_buffer(b"abc")
shape: tuple[int, ...] = dl.shape
legacy = dlpack.asdlpack(b"abc", dlc.DLManagedTensor)
cap = dlpack.Capsule(legacy.__dlpack__())
name: str | None = cap.get_name()
tensor = dlpack.DLTensor()
print(ndim, shape, name, tensor.ndim, len(dlpack.asdlpack(b"abc")))
