"""Producers for ``python -m dlpack check`` (``dlpack.tools.producers:NAME``), one per library.

Each returns a small array of 0..5 the way a user of that library makes one. TensorFlow's
tensors have a ``__dlpack__`` of their own (``tensorflow_tensor``); ``tensorflow`` wraps
``tf.experimental.dlpack.to_dlpack``, the export TensorFlow documents, as an old-style producer.
"""

from __future__ import annotations

from typing import Any

VALUES = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def numpy() -> Any:
    """A writable float32 ndarray."""
    import numpy as np

    return np.array(VALUES, dtype=np.float32).reshape(2, 3)


def numpy_readonly() -> Any:
    """A read-only ndarray: its exports must carry READ_ONLY."""
    a = numpy()
    a.flags.writeable = False
    return a


def torch() -> Any:
    """A float32 CPU tensor."""
    import torch as t

    return t.tensor(VALUES).reshape(2, 3)


def torch_requires_grad() -> Any:
    """A tensor torch refuses to export: its exchange API must refuse it too."""
    return torch().requires_grad_()


def jax() -> Any:
    """A float32 JAX array (immutable)."""
    import jax.numpy as jnp

    return jnp.asarray(VALUES, dtype=jnp.float32).reshape(2, 3)


class TensorFlowProducer:
    """``tf.experimental.dlpack.to_dlpack`` behind ``__dlpack__``, as TensorFlow offers it."""

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor

    def __dlpack__(self, *, stream: None = None) -> Any:
        import tensorflow as tf

        return tf.experimental.dlpack.to_dlpack(self.tensor)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def tensorflow() -> TensorFlowProducer:
    """A float32 TensorFlow tensor (immutable), through its to_dlpack."""
    import tensorflow as tf

    return TensorFlowProducer(tf.reshape(tf.constant(VALUES, dtype=tf.float32), (2, 3)))


def tensorflow_tensor() -> Any:
    """A plain float32 TensorFlow tensor, graded through its own ``__dlpack__``."""
    import tensorflow as tf

    return tf.reshape(tf.constant(VALUES, dtype=tf.float32), (2, 3))


def pyarrow() -> Any:
    """A float32 Arrow array (immutable buffers)."""
    import pyarrow as pa

    return pa.array(VALUES, type=pa.float32())


def pyarrow_chunked() -> Any:
    """A one-chunk float32 ChunkedArray: only __arrow_c_stream__ (graded by the Arrow rules)."""
    import pyarrow as pa

    return pa.chunked_array([pyarrow()])


def polars() -> Any:
    """A float32 Polars Series (the Arrow PyCapsule interface only, as a stream)."""
    import polars as pl

    return pl.Series("x", VALUES, dtype=pl.Float32)


def polars_nulls() -> Any:
    """A Polars Series with a null: its null_count and bitmap must agree."""
    import polars as pl

    return pl.Series("x", [0.0, None, 2.0, 3.0, 4.0, 5.0], dtype=pl.Float32)


def nanoarrow() -> Any:
    """A float32 nanoarrow array."""
    import nanoarrow as na

    return na.c_array(VALUES, na.float32())


def arro3() -> Any:
    """A float32 arro3 Array."""
    import arro3.core as a3

    return a3.Array.from_arrow(pyarrow())


def pandas() -> Any:
    """A pandas Series of float32[pyarrow]."""
    import pandas as pd

    return pd.Series(VALUES, dtype="float32[pyarrow]")


def duckdb() -> Any:
    """A one-column DuckDB query result."""
    import duckdb as db

    return db.sql("select (i::float) as x from range(6) t(i)")


def tvm_ffi() -> Any:
    """A tvm-ffi Tensor over a NumPy array."""
    import tvm_ffi as tf

    return tf.from_dlpack(numpy())


def pydlpack() -> Any:
    """pydlpack over a NumPy array."""
    from dlpack import asdlpack

    return asdlpack(numpy())


def pydlpack_bytes() -> Any:
    """pydlpack over immutable ``bytes``."""
    from dlpack import asdlpack

    return asdlpack(b"Hello!")
