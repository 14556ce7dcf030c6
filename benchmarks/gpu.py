"""CUDA exchange targets (the devices issue), as ratios against the native path in one process.

Run on a machine with a GPU and torch, CuPy and Numba built for CUDA:

    python benchmarks/gpu.py            # exit status 1 when a ratio misses its target

Without a GPU (or without one of the libraries) the rows that need it are skipped with a reason.
"""

from __future__ import annotations

import sys

from run import compare

from dlpack import asdlpack

ROUNDS, NUMBER = 15, 2000


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
    print(f"| {'exchange':44} | {'reference':34} | ours ns | ref ns | ratio | target |")
    print(f"|{'-' * 46}|{'-' * 36}|---------|--------|-------|--------|")
    for label, ours, ref_label, ref, target in rows:
        x, y, ratio, noise = compare(ours, ref, ROUNDS, NUMBER)
        ok = ratio <= target * (1 + noise)
        failed |= not ok
        print(f"| {label:44} | {ref_label:34} | {x:7.0f} | {y:6.0f} | {ratio:5.2f} | "
              f"≤ {target:<4} {'✓' if ok else '✗'} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
