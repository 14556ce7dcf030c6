"""Consumers for ``python -m dlpack check --consumer`` whose library has no ``from_dlpack(x)``.

Each takes one producer (an object with ``__dlpack__``) and returns the library's array, the
way a user of that library imports one.
"""

from __future__ import annotations

from typing import Any


def tensorflow(producer: Any) -> Any:
    """TensorFlow's ``from_dlpack`` takes a capsule: the one ``__dlpack__()`` gives."""
    import tensorflow as tf

    return tf.experimental.dlpack.from_dlpack(producer.__dlpack__())


def pyarrow_tensor(producer: Any) -> Any:
    """PyArrow's importer is a class method: ``pyarrow.Tensor.from_dlpack``."""
    import pyarrow as pa

    return pa.Tensor.from_dlpack(producer)

