"""A small real GPU job for scripts/gpu-smoke.sh: compute, then sit idle holding GPU memory.

Uses PyTorch or CuPy when one is installed; otherwise the CUDA driver API through ctypes
(libcuda.so.1, present wherever the NVIDIA driver is) with a PTX busy-loop kernel that the
driver compiles itself, so no CUDA toolkit is needed. Writes its phase to ``--status``.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import time
from collections.abc import Callable
from pathlib import Path

GIB = 1 << 30

PTX = b"""
.version 6.0
.target sm_50
.address_size 64

.visible .entry burn(.param .u64 out, .param .u32 iters)
{
    .reg .f32 %f<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    .reg .pred %p;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [iters];
    mov.f32 %f1, 0f3F800000;
    mov.f32 %f2, 0f3F000001;
    mov.u32 %r2, 0;
LOOP:
    fma.rn.f32 %f1, %f1, %f2, %f2;
    add.u32 %r2, %r2, 1;
    setp.lt.u32 %p, %r2, %r1;
    @%p bra LOOP;
    mov.u32 %r3, %tid.x;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r3, 4;
    add.u64 %rd2, %rd2, %rd3;
    st.global.f32 [%rd2], %f1;
    ret;
}
"""


def with_torch(hold_gib: float) -> tuple[Callable[[], None], object]:
    import torch

    x = torch.randn(4096, 4096, device="cuda")
    hold = torch.empty(int(hold_gib * GIB) // 4, dtype=torch.float32, device="cuda").fill_(1.0)

    def step() -> None:
        for _ in range(20):
            x.copy_(torch.tanh(x @ x))
        torch.cuda.synchronize()

    return step, (x, hold)


def with_cupy(hold_gib: float) -> tuple[Callable[[], None], object]:
    import cupy

    x = cupy.random.standard_normal((4096, 4096), dtype=cupy.float32)
    hold = cupy.ones(int(hold_gib * GIB) // 4, dtype=cupy.float32)

    def step() -> None:
        for _ in range(20):
            cupy.tanh(x @ x, out=x)
        cupy.cuda.Device().synchronize()

    return step, (x, hold)


def with_driver_api(hold_gib: float) -> tuple[Callable[[], None], object]:
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed with CUDA error {rc}")

    check(cuda.cuInit(0), "cuInit")
    dev, ctx, mod, fn = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    check(cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX)), "cuModuleLoadData")
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"burn"), "cuModuleGetFunction")
    out, hold = ctypes.c_uint64(), ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(out), ctypes.c_size_t(1024 * 4)), "cuMemAlloc")
    size = int(hold_gib * GIB)
    check(cuda.cuMemAlloc_v2(ctypes.byref(hold), ctypes.c_size_t(size)), "cuMemAlloc")
    check(cuda.cuMemsetD8_v2(hold, ctypes.c_ubyte(1), ctypes.c_size_t(size)), "cuMemsetD8")  # commit it
    iters = ctypes.c_uint32(1 << 20)
    params = (ctypes.c_void_p * 2)(ctypes.addressof(out), ctypes.addressof(iters))

    def step() -> None:
        for _ in range(4):
            rc = cuda.cuLaunchKernel(fn, 2048, 1, 1, 256, 1, 1, 0, None, params, None)
            check(rc, "cuLaunchKernel")
        check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")

    return step, (cuda, ctx, mod, out, hold, params, iters)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--compute", type=float, default=60, help="seconds of compute")
    ap.add_argument("--idle", type=float, default=180, help="seconds idle afterwards, holding memory")
    ap.add_argument("--hold-gib", type=float, default=2.0)
    ap.add_argument("--status", type=Path, required=True)
    ap.add_argument("--backend", choices=["auto", "torch", "cupy", "driver"], default="auto")
    args = ap.parse_args()
    backend = args.backend
    if backend == "auto":
        backend = next(
            (name for name in ("torch", "cupy") if importlib.util.find_spec(name) is not None), "driver"
        )
    setup = {"torch": with_torch, "cupy": with_cupy, "driver": with_driver_api}[backend]
    step, keep = setup(args.hold_gib)
    args.status.write_text(f"compute {backend}\n")
    end = time.monotonic() + args.compute
    while time.monotonic() < end:
        step()
    args.status.write_text(f"idle {backend}\n")
    time.sleep(args.idle)  # GPU memory stays allocated: what a crashed notebook kernel looks like
    args.status.write_text(f"done {backend}\n")
    del keep


if __name__ == "__main__":
    main()
