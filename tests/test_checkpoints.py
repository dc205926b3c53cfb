"""Checkpoint files: averaging is the elementwise mean, loading refuses anything but data, resume holds."""

import json

import pytest
import torch

from ablate.errors import UserError
from ablate.train import checkpoints
from tests.conftest import ROOT, cli, tiny_model

SMOKE = ROOT / "experiments" / "smoke.yaml"


def test_n_copies_of_one_checkpoint_average_to_it():
    state = tiny_model().state_dict()
    averaged = checkpoints.average([state] * 5)
    assert list(averaged) == list(state)
    for key, value in state.items():
        torch.testing.assert_close(averaged[key], value, rtol=0, atol=1e-7, msg=key)
        assert averaged[key].dtype == value.dtype


def test_two_state_dicts_average_to_their_elementwise_mean():
    g = torch.Generator().manual_seed(0)
    a = {"w": torch.randn(3, 4, generator=g), "b": torch.randn(4, generator=g), "count": torch.tensor(3)}
    b = {"w": torch.randn(3, 4, generator=g), "b": torch.randn(4, generator=g), "count": torch.tensor(7)}
    averaged = checkpoints.average([a, b])
    torch.testing.assert_close(averaged["w"], (a["w"] + b["w"]) / 2)
    torch.testing.assert_close(averaged["b"], (a["b"] + b["b"]) / 2)
    assert averaged["count"].item() == 7  # an integer buffer is not averaged: the last one stands
    with pytest.raises(ValueError, match="different tensors"):
        checkpoints.average([a, {"w": a["w"]}])


def test_saving_keeps_the_weights_of_the_last_n_steps(tmp_path):
    model = tiny_model()
    for step in (10, 20, 30, 40):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(step * step)  # 400, 900, 1600 kept: their mean is none of them (the middle one is 900)
        checkpoints.save(tmp_path, {"model": model.state_dict(), "step": step}, step, "hash", keep=3)
    assert checkpoints.kept_steps(tmp_path) == [20, 30, 40]
    averaged, steps = checkpoints.averaged_weights(tmp_path, 3)
    assert steps == [20, 30, 40]
    mean = (400 + 900 + 1600) / 3
    tensors = [v for k, v in averaged.items() if "weight" in k or "bias" in k]
    assert tensors and all(torch.allclose(v, torch.full_like(v, mean)) for v in tensors)
    assert json.loads((tmp_path / "checkpoints" / "last.json").read_text()) == {
        "step": 40, "config_hash": "hash", "state": "last-40.pt"}  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("last*")) == ["last-40.pt", "last.json"]
    checkpoints.forget_after(tmp_path, 30)
    assert checkpoints.kept_steps(tmp_path) == [20, 30]


def test_the_scored_weights_are_the_mean_of_the_averaged_steps_or_the_last_model(tmp_path):
    """What a finished run decoded, for decoding it again (benchmarks/decode_*.py): the mean of the steps its result
    averaged, whichever steps are kept beside them; without averaging, the last checkpoint's model."""
    model = tiny_model()
    for step in (10, 20, 30):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(step)
        checkpoints.save(tmp_path, {"model": model.state_dict(), "step": step}, step, "hash", keep=3)

    def values(state):
        return {v.flatten()[0].item() for k, v in state.items() if "weight" in k or "bias" in k}

    assert values(checkpoints.scored_weights(tmp_path, [10, 20], "hash")) == {15.0}  # not the last 3: 20
    assert values(checkpoints.scored_weights(tmp_path, None, "hash")) == {30.0}
    with pytest.raises(UserError, match=r"checkpoints: the weights of step\(s\) \[40\], which the run averaged"):
        checkpoints.scored_weights(tmp_path, [30, 40], "hash")
    with pytest.raises(UserError, match="no checkpoint of this run"):
        checkpoints.scored_weights(tmp_path, None, "another hash")


def test_a_kill_between_the_state_and_last_json_resumes_from_the_checkpoint_before_whole(tmp_path, monkeypatch):
    """The state is written to a file of its step, then last.json, which names it, then the one before goes: killed
    between the two writes, the run resumes from the checkpoint before, its state and its step together. (With one
    last.pt rewritten in place, a sweep killed there read step 40's state as step 30's: metrics.jsonl, cut at 30,
    lost steps 31-40, and the run went on from 41.)"""
    from ablate.rundir import checkpoint_step, last_checkpoint

    weights = tiny_model().state_dict()
    checkpoints.save(tmp_path, {"model": weights, "step": 30}, 30, "hash", keep=1)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the SIGKILL, after the state file and before last.json

    monkeypatch.setattr(checkpoints, "write_json", killed)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.save(tmp_path, {"model": weights, "step": 40}, 40, "hash", keep=1)
    monkeypatch.undo()
    found = last_checkpoint(tmp_path, "hash")
    assert found is not None and found.step == 30 and checkpoints.load_state(found)["step"] == 30
    assert checkpoint_step(tmp_path, "hash") == 30 and last_checkpoint(tmp_path, "another config") is None
    checkpoints.save(tmp_path, {"model": weights, "step": 50}, 50, "hash", keep=1)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("last*")) == ["last-50.pt", "last.json"]


def test_an_earlier_ablate_s_last_pt_resumes_and_a_state_at_another_step_is_one_line(tmp_path):
    """A checkpoint of an earlier ablate: last.pt, and a last.json that names no file. It resumes, and the next
    checkpoint replaces it. Its state at another step than last.json's (what the kill above left) stops the run."""
    from ablate.rundir import last_checkpoint

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    torch.save({"model": {}, "step": 40}, folder / "last.pt")
    (folder / "last.json").write_text(json.dumps({"step": 30, "config_hash": "hash"}))
    found = last_checkpoint(tmp_path, "hash")
    assert found is not None and (found.step, found.state.name) == (30, "last.pt")
    with pytest.raises(
        UserError, match=r"last\.pt: holds step 40, but checkpoints/last\.json says 30; start the run over"
    ):
        checkpoints.load_state(found)
    (folder / "last.json").write_text(json.dumps({"step": 40, "config_hash": "hash"}))
    assert checkpoints.load_state(last_checkpoint(tmp_path, "hash"))["step"] == 40
    checkpoints.save(tmp_path, {"model": {}, "step": 50}, 50, "hash", keep=1)
    assert sorted(p.name for p in folder.glob("last*")) == ["last-50.pt", "last.json"]
    for crafted in ("../../../etc/passwd", "last-49.pt", "step-50.pt"):  # only the file of its own step is read
        (folder / "last.json").write_text(json.dumps({"step": 50, "config_hash": "hash", "state": crafted}))
        assert last_checkpoint(tmp_path, "hash") is None
    for unreadable in ("[50]", '{"step": "fifty", "config_hash": "hash"}', "{"):  # none: the run starts afresh
        (folder / "last.json").write_text(unreadable)
        assert last_checkpoint(tmp_path, "hash") is None


class Exploit:
    """Unpickling this would run a shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_a_checkpoint_holding_an_arbitrary_object_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "last.pt"
    torch.save({"model": {}, "payload": Exploit(marker)}, path)
    with pytest.raises(UserError, match="refused: a checkpoint holds tensors and plain data only"):
        checkpoints.load(path)
    assert not marker.exists()


def test_a_crafted_checkpoint_stops_the_sweep_with_one_line(tmp_path):
    args = [str(SMOKE), "--only", "baseline", "--set", "training.max_steps=30", "--set", "training.checkpoint_every=10",
            "--results", str(tmp_path)]  # fmt: skip
    assert cli("run", *args).returncode == 0
    directory = tmp_path / "smoke" / "runs" / "baseline" / "seed-1"
    (directory / "result.json").unlink()  # as if killed before the end: the next run resumes from last-30.pt
    marker = tmp_path / "pwned"
    torch.save({"model": {}, "payload": Exploit(marker)}, directory / "checkpoints" / "last-30.pt")
    run = cli("run", *args)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert "last-30.pt: refused: a checkpoint holds tensors and plain data only" in line
    assert not marker.exists()


def test_averaging_needs_checkpoints(write):
    path = write("e.yaml", f"name: e\nextends: {SMOKE}\ntraining: {{checkpoint_every: null}}\n"
                           "evaluation: {average_checkpoints: 5}\n")  # fmt: skip
    run = cli("validate", str(path))
    assert run.returncode == 2
    assert run.stderr.strip() == (
        f"{path}: evaluation.average_checkpoints: averaging 5 checkpoints needs training.checkpoint_every"
    )


def test_averaging_changes_the_config_hash_only_when_on():
    from ablate.rundir import config_hash
    from ablate.sweep.experiment import load_experiment

    spec = load_experiment(SMOKE).baseline.spec.model_dump(mode="json")
    checkpointed = json.loads(json.dumps(spec))
    checkpointed["training"]["checkpoint_every"] = 7
    assert config_hash(spec) == config_hash(checkpointed)  # bookkeeping alone
    averaged = json.loads(json.dumps(checkpointed))
    averaged["evaluation"]["average_checkpoints"] = 3
    other = json.loads(json.dumps(averaged))
    other["training"]["checkpoint_every"] = 8
    assert len({config_hash(spec), config_hash(averaged), config_hash(other)}) == 3  # now what is averaged counts


def test_epoch_checkpoints_average_the_last_whole_passes_through_the_cli(tmp_path):
    """fairseq's --num-epoch-checkpoints: with `checkpoint_every: epoch` the run averages the weights of the last
    passes' ends, read here from the epoch each step logged, and not the partial pass a step cap cuts off."""
    args = [str(SMOKE), "--only", "baseline", "--set", "training.max_steps=45",
            "--set", "training.validate_every=epoch", "--set", "training.checkpoint_every=epoch",
            "--set", "evaluation.average_checkpoints=2", "--set", "data.max_pairs=300",
            "--set", "evaluation.beam_size=1", "--set", "evaluation.max_extra_len=5",
            "--results", str(tmp_path), "--threads-per-run", "1"]  # fmt: skip
    run = cli("run", *args)
    assert run.returncode == 0, run.stderr
    directory = tmp_path / "smoke" / "runs" / "baseline" / "seed-1"
    records = [json.loads(line) for line in (directory / "metrics.jsonl").open()]
    epoch_of = {r["step"]: r["epoch"] for r in records if "loss" in r}
    ends = [s for s in sorted(epoch_of) if s + 1 in epoch_of and epoch_of[s + 1] == epoch_of[s] + 1]
    assert len(ends) >= 2 and epoch_of[45] == epoch_of[44]  # two passes, and the cap falls inside a third
    validated = [r["step"] for r in records if "valid_loss" in r and 0 < r["step"] < 45]
    assert validated == ends
    result = json.loads((directory / "result.json").read_text())
    assert result["averaged_steps"] == ends[-2:]
