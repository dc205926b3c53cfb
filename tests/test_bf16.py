"""Emulated bf16 matmuls (ablate/train/bf16.py): the arithmetic of torch's own bf16 kernels, by fp32 kernels.

The reference is torch itself: its bf16 kernels (oneDNN's where the CPU has native bf16, its generic GEMM elsewhere)
and the exact product of the bf16 operands in float64. Every test runs on any CPU; on one without native bf16 the
reference kernels are the slow ones the emulation replaces, so the shapes are small.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import ablate.train.bf16 as bf16
from ablate.data.batches import collate
from ablate.model.decoding import beam_search
from ablate.train.bf16 import MATMULS, EmulatedBf16Matmuls, bf16_matmuls
from ablate.train.trainer import Trainer, TrainingSpec, autocast
from tests.conftest import tiny_model
from tests.test_precision import batch

CPU = torch.device("cpu")
ULP = 2.0**-7  # a bf16 ulp relative to a value in [1, 2): 8 significant bits


def operands(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(sum(sum(s) for s in shapes))
    return [torch.randn(*s, generator=g).bfloat16() for s in shapes]


# aten op -> operand shapes, with scalars where the op takes them
CASES = {
    "mm": (torch.ops.aten.mm.default, [(37, 130), (130, 29)], {}),
    "addmm": (torch.ops.aten.addmm.default, [(29,), (37, 130), (130, 29)], {"beta": 0.5, "alpha": 2.0}),
    "bmm": (torch.ops.aten.bmm.default, [(3, 11, 40), (3, 40, 7)], {}),
    "baddbmm": (torch.ops.aten.baddbmm.default, [(3, 11, 7), (3, 11, 40), (3, 40, 7)], {"beta": 1.5}),
    "addbmm": (torch.ops.aten.addbmm.default, [(11, 7), (3, 11, 40), (3, 40, 7)], {}),
    "mv": (torch.ops.aten.mv.default, [(23, 64), (64,)], {}),
    "addmv": (torch.ops.aten.addmv.default, [(23,), (23, 64), (64,)], {"alpha": -1.0}),
    "dot": (torch.ops.aten.dot.default, [(300,), (300,)], {}),
}


def test_every_intercepted_op_has_a_case():
    assert {op for op, _, _ in CASES.values()} == MATMULS


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_product_is_torchs_own_bf16_product(name):
    """Within one bf16 rounding of torch's bf16 kernel and of the exact product of the bf16 operands: the sums are
    fp32's, only their order may differ. Not the fp32 product of the unrounded operands: the rounding is bf16's."""
    op, shapes, scalars = CASES[name]
    args = operands(*shapes)
    with EmulatedBf16Matmuls():
        emulated = op(*args, **scalars)
    torchs = op(*args, **scalars)
    exact = op(*[a.double() for a in args], **scalars)
    assert emulated.dtype == torch.bfloat16 and emulated.shape == torchs.shape
    scale = exact.abs().max().item()
    assert (emulated.double() - exact).abs().max().item() <= ULP * scale
    assert (emulated.double() - torchs.double()).abs().max().item() <= ULP * scale
    # rounded to bf16: as far from the fp32 product as bf16's rounding puts it, not fp32's round-off away
    fp32 = op(*[a.float() for a in args], **scalars)
    assert torch.equal(emulated, fp32.bfloat16())


def test_the_operands_are_bf16_not_the_fp32_values_autocast_was_given():
    """Under autocast a linear layer of fp32 weights and inputs multiplies their bf16 roundings."""
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(16, 48, generator=g), torch.randn(24, 48, generator=g), torch.randn(24, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16), EmulatedBf16Matmuls():
        emulated = F.linear(x, w, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torchs = F.linear(x, w, b)
    rounded = F.linear(x.bfloat16().double(), w.bfloat16().double(), b.bfloat16().double())
    assert emulated.dtype == torch.bfloat16
    scale = rounded.abs().max().item()
    assert (emulated.double() - rounded).abs().max().item() <= ULP * scale
    assert (emulated.double() - torchs.double()).abs().max().item() <= ULP * scale
    unrounded = F.linear(x.double(), w.double(), b.double())
    assert (emulated.double() - unrounded).abs().max().item() > 1e-3 * scale  # bf16's operands, visibly


def test_fp32_and_mixed_products_pass_through_untouched():
    a, b = torch.randn(9, 17), torch.randn(17, 5)
    with EmulatedBf16Matmuls():
        same = torch.mm(a, b)
        with pytest.raises(RuntimeError):  # torch refuses mixed dtypes; the emulation does not paper over it
            torch.mm(a.bfloat16(), b)
    assert torch.equal(same, torch.mm(a, b))


class Kernels(TorchDispatchMode):
    """Records every matmul that reaches a kernel, with its operands' dtypes."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[str, set[torch.dtype]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in MATMULS:
            self.seen.append((str(func), {a.dtype for a in args if isinstance(a, torch.Tensor)}))
        return func(*args, **(kwargs or {}))


def test_every_matmul_of_a_training_step_and_of_beam_search_reaches_the_kernels_in_fp32():
    """The backward's products included: autocast saves bf16 tensors for them, and the emulation sits below
    autograd. The kernels' log is the outer mode, so it sees what the emulation hands on."""
    model = tiny_model(vocab=50).train()
    spec = TrainingSpec(schedule={"name": "constant", "lr": 1e-3}, max_steps=1, precision="bf16")
    trainer = Trainer(model, spec, 32)
    with Kernels() as kernels, EmulatedBf16Matmuls():
        trainer.train_step([collate(batch())])
        model.eval()
        with torch.no_grad(), autocast(CPU, "bf16"):
            beam_search(model, collate(batch()).src[:2], beam_size=3, max_extra_len=5)
    dtypes = [d for _, d in kernels.seen]
    assert len(dtypes) > 40  # forward, backward (two products a forward one) and decoding
    assert all(d == {torch.float32} for d in dtypes), kernels.seen


def test_a_training_step_matches_torchs_bf16_step():
    """The same loss and, within bf16's round-off, the same gradients as torch's own bf16 kernels; further from
    the fp32 step's gradients than fp32 round-off would put them."""

    def gradients(precision: str, emulate: bool) -> tuple[float, torch.Tensor]:
        model = tiny_model(vocab=50).train()
        spec = TrainingSpec(schedule={"name": "constant", "lr": 1e-3}, max_steps=1, precision=precision)
        trainer = Trainer(model, spec, 32)
        trainer.optimizer.step = lambda: None  # keep the gradients: zero_grad follows
        trainer.optimizer.zero_grad = lambda set_to_none=True: None
        with EmulatedBf16Matmuls() if emulate else bf16_matmuls(CPU, "fp32"):
            loss = trainer.train_step([collate(batch())])
        return loss, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    loss, emulated = gradients("bf16", True)
    torch_loss, torchs = gradients("bf16", False)
    _, fp32 = gradients("fp32", False)
    assert loss == pytest.approx(torch_loss, rel=2e-3)
    scale = fp32.abs().max().item()
    assert (emulated - torchs).abs().max().item() < 0.02 * scale
    assert torch.nn.functional.cosine_similarity(emulated, torchs, dim=0) > 0.9999
    assert (emulated - fp32).abs().max().item() > 1e-4 * scale  # bf16's step, not fp32's


@pytest.mark.parametrize(("precision", "native", "device", "emulates"), [
    ("bf16", False, "cpu", True), ("bf16", True, "cpu", False), ("fp32", False, "cpu", False),
    ("bf16", False, "cuda", False),
])  # fmt: skip
def test_the_emulation_is_used_where_bf16_would_run_on_torchs_generic_kernels(monkeypatch, precision, native,
                                                                             device, emulates):  # fmt: skip
    monkeypatch.setattr(bf16, "native_bf16", lambda: native)
    assert isinstance(bf16_matmuls(torch.device(device), precision), EmulatedBf16Matmuls) == emulates
