"""training.precision: bf16 autocast with fp32 master weights and an fp32 loss, on the CPU too; auto follows the CPU."""

import json
import os
import re

import pytest
import torch

from ablate.data.batches import collate
from ablate.data.tokenizer import BOS, EOS
from ablate.train.device import native_bf16, resolve_precision
from ablate.train.spec import TrainingSpec
from ablate.train.trainer import Trainer, autocast
from tests.conftest import cli, tiny_model
from tests.test_own_files import experiment, write_corpus

CPU = torch.device("cpu")


def test_auto_is_bf16_on_cuda_and_on_cpus_with_native_bf16():
    assert resolve_precision(CPU, "auto") == ("bf16" if native_bf16() else "fp32")
    assert resolve_precision(torch.device("cuda"), "auto") == "bf16"
    assert resolve_precision(CPU, "fp32") == "fp32" and resolve_precision(CPU, "bf16") == "bf16"


def test_native_bf16_is_what_torch_reports():
    reported = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert native_bf16() == reported


def batch():
    g = torch.Generator().manual_seed(0)
    rows = [(torch.randint(4, 50, (n,), generator=g).tolist(), torch.randint(4, 50, (n + 1,), generator=g).tolist())
            for n in (5, 7, 9, 6)]  # fmt: skip
    return [([*s, EOS], [BOS, *t, EOS]) for s, t in rows]


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_a_step_computes_in_the_precision_and_keeps_fp32_weights(precision):
    model = tiny_model()
    with autocast(CPU, precision):
        examples = collate(batch())
        logits = model(examples.src, examples.tgt[:, :-1])
    assert logits.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
    spec = TrainingSpec(schedule={"name": "constant", "lr": 1e-3}, max_steps=1, precision=precision)
    trainer = Trainer(model.train(), spec, 32)
    seen = []  # the dtype of the logits the training step itself computes
    hook = model.embeddings.output.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    loss = trainer.train_step([collate(batch())])
    hook.remove()
    assert seen == [torch.bfloat16 if precision == "bf16" else torch.float32]
    assert isinstance(loss, float)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights
    assert all(s["exp_avg"].dtype == torch.float32 for s in trainer.optimizer.state.values())
    reference = Trainer(tiny_model().train(), spec.model_copy(update={"precision": "fp32"}), 32)
    assert loss == pytest.approx(reference.train_step([collate(batch())]), abs=0.05)  # bf16 round-off, same loss


def test_a_bf16_run_through_the_cli_records_its_precision_and_warns_where_bf16_is_emulated(tmp_path, write):
    """A small corpus of its own (30 test sentences): where bf16 is emulated, decoding Multi30k's 1,000 would take
    minutes. The plan warns, before training, when bf16 is forced on a CPU that does not have it."""
    write_corpus(tmp_path)
    run = cli("run", experiment(write, tmp_path), "--only", "baseline", "--set", "training.precision=bf16",
              "--set", "training.validate_every=20", "--results", str(tmp_path / "results"))  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "results" / "own" / "runs" / "baseline" / "seed-1" / "result.json").read_text())
    assert result["precision"] == "bf16" and result["status"] == "completed"
    assert "bf16" in (tmp_path / "results" / "own" / "summary.csv").read_text()
    warned = "force training.precision bf16 on a CPU without native bf16" in run.stdout
    assert warned == (not native_bf16())
    if warned:
        assert re.search(r"at \d+\.\d\d times fp32's matmul speed here", run.stdout)


def test_a_worker_caps_both_primitive_caches_unless_the_user_set_them():
    """Set before torch loads in the worker's process: each child gets them; a user's own value is kept."""
    import subprocess
    import sys

    names = ["ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"]
    code = ("import os\nfrom ablate.train.worker import bound_primitive_caches\nbound_primitive_caches()\n"
            f"print(*(os.environ[name] for name in {names}))")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in names}
    default = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert default.stdout.split() == ["32", "32"]
    own = subprocess.run([sys.executable, "-c", code], env=env | {"LRU_CACHE_CAPACITY": "7"},
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert own.stdout.split() == ["32", "7"]


def test_the_cli_caps_the_caches_before_a_command_runs(monkeypatch):
    """Under torchrun the CLI's own process trains: the caps are set before the command (and torch) starts."""
    import ablate.cli

    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
        monkeypatch.setenv(name, "")  # recorded as it was, so that what main sets is undone after the test
        monkeypatch.delenv(name)
    seen: dict[str, str] = {}
    monkeypatch.setattr(ablate.cli, "cmd_run", lambda args: seen.update(os.environ) or 0)
    assert ablate.cli.main(["run", "experiments/smoke.yaml"]) == 0
    assert (seen["ONEDNN_PRIMITIVE_CACHE_CAPACITY"], seen["LRU_CACHE_CAPACITY"]) == ("32", "32")
