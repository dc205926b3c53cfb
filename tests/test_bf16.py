"""Emulated bf16 matmuls (ablate/train/bf16.py): a native bf16 kernel's arithmetic, by fp32 kernels.

The references: the exact product of the bf16 operands in float64, which a result must meet element by element
within what a native kernel may be off it (fp32 sums, one rounding to bf16); torch's own bf16 kernels, held to the
same bound (oneDNN's where the CPU has native bf16, its generic GEMM elsewhere); and a log of what reaches the
kernels, which says whether a product ran in fp32. Every test runs on any CPU; on one without native bf16 torch's
kernels are the slow ones the emulation replaces, so the shapes are small.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import ablate.train.bf16 as bf16
from ablate.data.batches import collate
from ablate.model.decoding import beam_search
from ablate.train.bf16 import PRODUCTS, EmulatedBf16Matmuls, bf16_matmuls
from ablate.train.spec import TrainingSpec
from ablate.train.trainer import Trainer, autocast
from tests.conftest import tiny_model
from tests.test_precision import batch

CPU = torch.device("cpu")


def operands(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(sum(sum(s) for s in shapes))
    return [torch.randn(*s, generator=g).bfloat16() for s in shapes]


aten = torch.ops.aten
# name -> (op, operand shapes, scalars, the inner dimension k of its sums)
CASES = {
    "mm": (aten.mm.default, [(37, 130), (130, 29)], {}, 130),
    "addmm": (aten.addmm.default, [(29,), (37, 130), (130, 29)], {"beta": 0.5, "alpha": 2.0}, 130),
    "bmm": (aten.bmm.default, [(3, 11, 40), (3, 40, 7)], {}, 40),
    "baddbmm": (aten.baddbmm.default, [(3, 11, 7), (3, 11, 40), (3, 40, 7)], {"beta": 1.5}, 40),
    "addbmm": (aten.addbmm.default, [(11, 7), (3, 11, 40), (3, 40, 7)], {}, 120),
    "mv": (aten.mv.default, [(23, 64), (64,)], {}, 64),
    "addmv": (aten.addmv.default, [(23,), (23, 64), (64,)], {"alpha": -1.0}, 64),
    "dot": (aten.dot.default, [(300,), (300,)], {}, 300),
    "_addmm_activation": (aten._addmm_activation.default, [(29,), (37, 130), (130, 29)], {"use_gelu": True}, 130),
}


def exact(op, args: list[torch.Tensor], scalars: dict) -> torch.Tensor:
    """The product of the bf16 operands in float64, with no rounding to speak of."""
    return op(*[a.double() for a in args], **scalars)


def bound(op, args: list[torch.Tensor], scalars: dict, k: int) -> torch.Tensor:
    """Element by element, what a native kernel may be off the exact value: fp32 sums of k exact products (k ulps
    of fp32 of the sum of magnitudes, a loose bound) and one rounding to bf16 (half a bf16 ulp, 2^-8 relative).
    A second rounding, or an operand left unrounded, breaks it where terms cancel."""
    magnitudes = op(*[a.double().abs() for a in args], **{**scalars, **({"alpha": abs(scalars["alpha"])}
                                                                        if "alpha" in scalars else {})})  # fmt: skip
    return 2.0**-8 * exact(op, args, scalars).abs() + (k + 2) * 2.0**-24 * magnitudes + 1e-30


class Kernels(TorchDispatchMode):
    """Records every op that reaches a kernel with its operands' dtypes. Entered before the emulation, it is the
    outer mode: it sees what the emulation hands on."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[str, set[torch.dtype]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append((func.overloadpacket.__name__, {a.dtype for a in args if isinstance(a, torch.Tensor)}))
        return func(*args, **(kwargs or {}))

    def bf16(self, names: set[str]) -> list[str]:
        """The ops among `names` that reached a kernel with a bf16 operand."""
        return [name for name, dtypes in self.seen if name in names and torch.bfloat16 in dtypes]


# Every op that multiplies matrices, whatever the emulation covers: one of these with a bf16 operand at a kernel
# is a product that ran on torch's generic bf16 kernels.
HEAVY = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "_addmm_activation", "linear",
         "matmul", "einsum", "bilinear", "tensordot", "convolution", "_convolution", "scaled_dot_product_attention",
         "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math"}  # fmt: skip


# torch's CPU bf16 kernels round these more than once: _addmm_activation rounds the product to bf16 before its
# activation, addbmm its partial sums. Seen with the generic kernels (an AVX2 EPYC, torch 2.13) and with the native
# ones too (a Zen 4 with AVX-512 BF16, torch 2.13, where both broke the bound). The emulation rounds once; the
# bound holds torch's own kernel to it only for the other ops.
ROUNDS_MORE = {"addbmm", "_addmm_activation"}


def test_every_intercepted_op_has_a_case():
    assert {op.overloadpacket for op, *_ in CASES.values()} == PRODUCTS


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_product_reaches_the_kernel_in_fp32_and_is_the_exact_product_rounded_once(name):
    """Element by element within what a native kernel may be off the exact product of the bf16 operands; torch's own
    bf16 kernel is held to the same bound (but for ROUNDS_MORE), so the bound is a native kernel's and not the
    emulation's."""
    op, shapes, scalars, k = CASES[name]
    args = operands(*shapes)
    with Kernels() as kernels, EmulatedBf16Matmuls():
        emulated = op(*args, **scalars)
    assert not kernels.bf16(HEAVY) and any(n == name for n, _ in kernels.seen)
    torchs = op(*args, **scalars)
    assert emulated.dtype == torch.bfloat16 and emulated.shape == torchs.shape
    off = bound(op, args, scalars, k)
    assert ((emulated.double() - exact(op, args, scalars)).abs() <= off).all()
    if name not in ROUNDS_MORE:
        assert ((torchs.double() - exact(op, args, scalars)).abs() <= off).all()


def test_the_bound_is_not_loose_enough_to_pass_a_double_rounding():
    """What the bound rules out: addmm's product rounded to bf16 before the bias is added, then rounded again."""
    op, shapes, scalars, k = CASES["addmm"]
    bias, a, b = operands(*shapes)
    twice = scalars["beta"] * bias.float() + scalars["alpha"] * torch.mm(a.float(), b.float()).bfloat16().float()
    twice = twice.bfloat16()
    assert ((twice.double() - exact(op, [bias, a, b], scalars)).abs() > bound(op, [bias, a, b], scalars, k)).any()


def test_out_variants_write_their_bf16_product_where_asked():
    a, b = operands((9, 33), (33, 5))
    out = torch.empty(0, dtype=torch.bfloat16)
    with Kernels() as kernels, EmulatedBf16Matmuls():
        returned = torch.mm(a, b, out=out)
    assert returned is out and out.shape == (9, 5) and not kernels.bf16(HEAVY)
    assert ((out.double() - exact(aten.mm.default, [a, b], {})).abs() <= bound(aten.mm.default, [a, b], {}, 33)).all()


def test_under_inference_mode_linear_and_matmul_are_decomposed_into_emulated_products():
    """torch.inference_mode hands linear and matmul to a mode whole; without their decomposition they reached
    torch's generic bf16 kernel."""
    g = torch.Generator().manual_seed(5)
    x, w, b = torch.randn(6, 40, generator=g), torch.randn(12, 40, generator=g), torch.randn(12, generator=g)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16), Kernels() as kernels, \
            EmulatedBf16Matmuls():  # fmt: skip
        linear, matmul = F.linear(x, w, b), x @ w.T
    assert not kernels.bf16(HEAVY), kernels.seen
    assert linear.dtype == matmul.dtype == torch.bfloat16
    args = [b.bfloat16(), x.bfloat16(), w.bfloat16().T]
    assert ((linear.double() - exact(aten.addmm.default, args, {})).abs()
            <= bound(aten.addmm.default, args, {}, 40)).all()  # fmt: skip


def test_the_operands_are_bf16_not_the_fp32_values_autocast_was_given():
    """Under autocast a linear layer of fp32 weights and inputs multiplies their bf16 roundings."""
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(16, 48, generator=g), torch.randn(24, 48, generator=g), torch.randn(24, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16), EmulatedBf16Matmuls():
        emulated = F.linear(x, w, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torchs = F.linear(x, w, b)
    args = [b.bfloat16(), x.bfloat16(), w.bfloat16().T]  # what autocast hands addmm
    rounded, off = exact(aten.addmm.default, args, {}), bound(aten.addmm.default, args, {}, 48)
    assert emulated.dtype == torch.bfloat16
    assert ((emulated.double() - rounded).abs() <= off).all()
    assert ((torchs.double() - rounded).abs() <= off).all()
    unrounded = F.linear(x.double(), w.double(), b.double())
    assert ((emulated.double() - unrounded).abs() > off).any()  # bf16's operands, visibly


def test_fp32_and_mixed_products_pass_through_untouched():
    a, b = torch.randn(9, 17), torch.randn(17, 5)
    with EmulatedBf16Matmuls():
        same = torch.mm(a, b)
        with pytest.raises(RuntimeError):  # torch refuses mixed dtypes; the emulation does not paper over it
            torch.mm(a.bfloat16(), b)
    assert torch.equal(same, torch.mm(a, b))


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
    products = [dtypes for name, dtypes in kernels.seen if name in HEAVY]
    assert len(products) > 40  # forward, backward (two products a forward one) and decoding
    assert not kernels.bf16(HEAVY), [name for name, dtypes in kernels.seen if name in HEAVY]


def test_a_training_step_matches_torchs_bf16_step():
    """The same loss and, within bf16's round-off, the same gradients as torch's own bf16 kernels; further from
    the fp32 step's gradients than fp32 round-off would put them. It checks the numbers, not that the emulation ran
    (torch's kernels would pass): the kernels' log above checks that."""

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
