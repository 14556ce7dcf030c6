"""The torch half of .ci/typed_usage.py (`mypy --strict` with torch's own annotations), for the
CI leg that has torch."""

from __future__ import annotations

import torch
from torch.utils.dlpack import from_dlpack  # torch.from_dlpack itself: torch does not mark the

# re-export, so mypy --strict refuses that spelling
from dlpack import asdlpack


def to_torch(data: bytes) -> torch.Tensor:
    return from_dlpack(asdlpack(data))


print(to_torch(b"Hello!").tolist(), asdlpack(torch.arange(3)).device[0].name)
