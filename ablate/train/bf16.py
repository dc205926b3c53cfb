"""bf16 matmuls on a CPU without native bf16, computed as native ones are, by fp32 kernels.

Under bf16 autocast a matmul takes bf16 operands and returns a bf16 product. A CPU with AVX-512 BF16 or AMX
multiplies the bf16 operands exactly and accumulates in fp32 (oneDNN's bf16 GEMM), then rounds the sum to bf16.
Elsewhere torch 2.13 falls back to a generic bf16 GEMM: on 2 AVX2 EPYC cores, one thread, a training step of the
converged recipe took 12.9 s in bf16 against 0.61 s in fp32, 98% of it in `aten::mm` and `aten::addmm`, so that a
converged run of 8,000 steps would take 29 hours (`benchmarks/levers.py --arms bf16,bf16-emulated`,
benchmarks/README.md).

`EmulatedBf16Matmuls` computes those products the native way with fp32 kernels: the bf16 operands widened to
fp32 (exactly: every bf16 value is an fp32 value), multiplied and accumulated in fp32 (each product of two
8-bit significands is exact in fp32's 24 bits), the bias or the scaled input of addmm-like products added in fp32,
the result rounded once to bf16. The arithmetic is bf16's; the order of the fp32 sums differs from a native
kernel's, as it differs between thread counts, and two corners differ that training does not meet: native kernels
flush subnormal operands and results to zero, and an infinite operand under alpha=0 gives what fp32's kernel gives
(a finite result, where torch's generic bf16 kernel gives NaN). It is a TorchDispatchMode, so it sits below
autograd and sees every matmul: the forward's, the backward's (the gradient products of bf16 tensors saved by
autocast) and beam search's. Other operations pass through unchanged.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ablate.train.device import native_bf16

aten = torch.ops.aten
PRODUCTS = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.addbmm, aten.mv, aten.addmv, aten.dot,
            aten._addmm_activation}  # fmt: skip
"""The products that autocast makes bf16 and that reach a CPU kernel (every overload, `out=` ones included)."""
COMPOSITES = {aten.linear, aten.matmul}
"""Ops that autograd decomposes into PRODUCTS before a mode sees them, but that reach it whole under
torch.inference_mode: decomposed here, so that their products come back through the mode."""
INTERCEPTED = PRODUCTS | COMPOSITES  # one lookup for every op of a step that passes through


class EmulatedBf16Matmuls(TorchDispatchMode):
    """Every bf16 matmul on the CPU computed in fp32 from its bf16 operands, the product rounded to bf16."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet in INTERCEPTED and _bf16_cpu(args):
            if packet in COMPOSITES:
                with self:  # a handler runs outside its mode: re-entered, so that the pieces come back here
                    pieces = func.decompose(*args, **kwargs)
                if pieces is not NotImplemented:
                    return pieces
            else:
                out = kwargs.pop("out", None)
                if out is None or out.dtype == torch.bfloat16:
                    wide = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
                    product = packet.default(*wide, **kwargs).to(torch.bfloat16)
                    return product if out is None else out.resize_(product.shape).copy_(product)
                kwargs["out"] = out  # another dtype: torch's own kernel says what it makes of it
        return func(*args, **kwargs)


def _bf16_cpu(args: tuple[Any, ...]) -> bool:
    """Whether a matmul's tensor operands are bf16 on the CPU (autocast casts them all to one dtype)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return bool(tensors) and all(t.dtype == torch.bfloat16 and t.device.type == "cpu" for t in tensors)


def bf16_matmuls(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """What computes this process's bf16 matmuls: the emulation where `precision` is bf16 on a CPU without native
    bf16, nothing (torch's own kernels) elsewhere."""
    if precision == "bf16" and device.type == "cpu" and not native_bf16():
        return EmulatedBf16Matmuls()
    return contextlib.nullcontext()
