"""CUDA exchange targets (docs/spec.md §8, §10), as ratios against the native path in one process.

Run on a machine with a GPU and torch, CuPy and Numba built for CUDA:

    python benchmarks/gpu.py            # exit status 1 when a ratio misses its target

Without a GPU (or without one of the libraries) the rows that need it are skipped with a reason.
"""

from __future__ import annotations

import sys

from run import compare

from dlpack import asdlpack

ROUNDS, NUMBER = 15, 2000
COPY_NUMBER = 50                # rows that move megabytes: fewer calls per round


class _CAIOnly:
    """Speaks only the CUDA array interface (of a torch tensor, on torch's current stream)."""

    def __init__(self, t, readonly=False):
        self.t = t
        cai = dict(t.__cuda_array_interface__)
        cai["data"] = (cai["data"][0], readonly)
        self.__cuda_array_interface__ = cai


def _copy_rows(torch):
    """The copies pydlpack makes with the driver, against torch's own (1 MiB of float32)."""
    import numpy as np

    t = torch.arange(1 << 18, device="cuda", dtype=torch.float32)
    big = torch.arange(1 << 22, device="cuda", dtype=torch.float32).reshape(4096, 1024)
    column = _CAIOnly(big[:, 3])                    # 16 KiB of a 16 MiB tensor
    odd = torch.arange(1024 * 1001, device="cuda", dtype=torch.float32).reshape(1024, 1001)
    every_other = _CAIOnly(odd[:, ::2])             # rows 1001 floats apart: its covering span
    cube = torch.arange(64 * 128 * 100, device="cuda", dtype=torch.float32).reshape(64, 128, 100)
    slab = _CAIOnly(cube[:, ::2, :50])              # slices a whole number of rows apart: 3-D
    host = np.arange(1 << 18, dtype=np.float32)
    readonly = asdlpack(_CAIOnly(t, readonly=True))

    def to_host(obj):
        return lambda: np.from_dlpack(asdlpack(obj), device="cpu")

    return [
        ("np.from_dlpack(asdlpack(t_cuda), device=cpu)", to_host(t),
         "t_cuda.cpu().numpy()", lambda: t.cpu().numpy(), 1.2),
        ("np.from_dlpack(column_cai, device=cpu)", to_host(column),
         "big[:, 3].cpu().numpy()", lambda: big[:, 3].cpu().numpy(), 2.0),
        ("np.from_dlpack(odd[:, ::2]_cai, device=cpu)", to_host(every_other),
         "odd[:, ::2].cpu().numpy()", lambda: odd[:, ::2].cpu().numpy(), 2.0),
        ("np.from_dlpack(cube[:, ::2, :50]_cai, device=cpu)", to_host(slab),
         "cube[:, ::2, :50].cpu().numpy()", lambda: cube[:, ::2, :50].cpu().numpy(), 2.0),
        ("asdlpack(a).__dlpack__(dl_device=cuda)",
         lambda: torch.utils.dlpack.from_dlpack(asdlpack(host).__dlpack__(
             dl_device=(2, 0), max_version=(1, 0))),
         "torch.from_numpy(a).cuda()", lambda: torch.from_numpy(host).cuda(), 1.3),
        ("read-only cai.__dlpack__() [device copy]",
         lambda: torch.utils.dlpack.from_dlpack(readonly.__dlpack__()),
         "t_cuda.clone()", lambda: t.clone(), 2.0),
    ]


def main() -> int:
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("skipped: no CUDA GPU here")
        return 0
    rows = []
    t = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    rows.append(("torch.from_dlpack(asdlpack(t_cuda))", lambda: torch.from_dlpack(asdlpack(t)),
                 "torch.from_dlpack(t_cuda)", lambda: torch.from_dlpack(t), 1.05))
    try:
        rows += [(*row, COPY_NUMBER) for row in _copy_rows(torch)]
    except ImportError as e:
        print(f"copy rows skipped: {e}")
    try:
        import cupy
        from numba import cuda
    except ImportError as e:
        print(f"CuPy/Numba rows skipped: {e}")
    else:
        n = cuda.to_device(t.cpu().numpy())

        class CAIOnly:
            __cuda_array_interface__ = n.__cuda_array_interface__

        cai = CAIOnly()
        rows += [
            ("asdlpack(cai_only)", lambda: asdlpack(cai),
             "cupy.asarray(cai_only)", lambda: cupy.asarray(cai), 0.5),
            ("cupy.from_dlpack(asdlpack(numba_arr))", lambda: cupy.from_dlpack(asdlpack(n)),
             "cupy.asarray(numba_arr)", lambda: cupy.asarray(n), 1.1),
            ("numba.cuda.as_cuda_array(asdlpack(t_cuda))",
             lambda: cuda.as_cuda_array(asdlpack(t)),
             "numba.cuda.as_cuda_array(t_cuda)", lambda: cuda.as_cuda_array(t), 1.1),
        ]
    failed = False
    print(f"| {'exchange':46} | {'reference':34} | ours ns | ref ns | ratio | target |")
    print(f"|{'-' * 48}|{'-' * 36}|---------|--------|-------|--------|")
    for label, ours, ref_label, ref, target, *number in rows:
        x, y, ratio, noise = compare(ours, ref, ROUNDS, number[0] if number else NUMBER)
        ok = ratio <= target * (1 + noise)
        failed |= not ok
        print(f"| {label:46} | {ref_label:34} | {x:7.0f} | {y:6.0f} | {ratio:5.2f} | "
              f"≤ {target:<4} {'✓' if ok else '✗'} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
