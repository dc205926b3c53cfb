"""The registry: registration rules, part choices in both forms, and plugins."""

import pytest
import torch
from torch import nn

import ablate
from ablate.errors import SpecValueError
from ablate.parts.feedforward import FEEDFORWARD, FeedForward, ReLUFeedForward
from ablate.parts.positions import POSITIONS, Positions
from ablate.registry import REGISTRY, Part, PartParams, Slot, slot
from tests.conftest import ROOT, cli

PLUGIN = ROOT / "tests" / "fixtures" / "plugin_parts.py"


def test_duplicate_name_is_an_error():
    with pytest.raises(ValueError, match="already registered"):

        @POSITIONS.register("learned")
        class Again(Positions):
            pass


def test_wrong_base_class_is_an_error():
    with pytest.raises(TypeError, match="must subclass Positions"):

        @POSITIONS.register("not_positions")
        class NotPositions(Part, nn.Module):
            pass

    assert "not_positions" not in POSITIONS.parts


def test_a_slot_is_declared_once_and_holds_parts():
    with pytest.raises(ValueError, match="already declared"):
        slot("positions", Positions, "again")
    with pytest.raises(TypeError, match="must subclass Part"):
        slot("odd", nn.Module, "a base that is no Part")


def test_unknown_part_suggests_and_lists():
    with pytest.raises(SpecValueError, match=r"unknown positions 'lerned'; did you mean 'learned'\? \(registered: "):
        POSITIONS.parse("lerned")


@pytest.mark.parametrize(
    "value, message",
    [
        ({"name": "learned", "max_len": 0}, "greater than 0"),
        ({"name": "learned", "max_lne": 5}, "did you mean 'max_len'"),
        ({"name": "sinusoidal", "max_len": 5}, "positions 'sinusoidal' takes no parameters"),
        ({"max_len": 5}, "needs a 'name'"),
        (3, "expected a part name"),
    ],
)
def test_bad_part_parameters(value, message):
    with pytest.raises(SpecValueError, match=message):
        POSITIONS.parse(value)


def test_every_part_has_a_description_and_a_strict_params_model():
    for s in REGISTRY.values():
        assert isinstance(s, Slot) and s.parts
        for part in s:
            assert part.description(), part
            assert issubclass(part.Params, PartParams)
            assert part.Params.model_config["extra"] == "forbid"


def test_a_required_parameter_is_always_written_out():
    # A private slot, not FEEDFORWARD: the registry the other tests iterate over stays as it was.
    widths = Slot("feedforward", FeedForward, "feed-forward parts of this test")

    @widths.register("widened_relu")
    class Widened(ReLUFeedForward):
        """relu FFN whose hidden width is d_ff times a factor that must be given."""

        class Params(PartParams):
            width_factor: float
            bias: bool = True

    spec = widths.parse({"name": "widened_relu", "width_factor": 1.0})
    assert str(spec) == "widened_relu(width_factor=1.0)"  # required: written out even where it is 1.0
    assert spec.dump() == {"name": "widened_relu", "width_factor": 1.0}  # bias keeps its default: left out
    assert widths.parse(spec.dump()) == spec
    unbiased = widths.parse({"name": "widened_relu", "width_factor": 2.0, "bias": False})
    assert unbiased.dump() == {"name": "widened_relu", "width_factor": 2.0, "bias": False}


def test_plugin_file_registers_a_part_that_validates_and_runs(write):
    path = write(
        "exp.yaml",
        f"""
name: plugged
plugins: [{PLUGIN}]
model: {{d_model: 16, heads: 2, d_ff: 32, encoder_layers: 1, decoder_layers: 1,
         feedforward: {{name: squared_relu, power: 3.0}}}}
""",
    )
    experiment = ablate.load_experiment(path)
    spec = experiment.baseline.spec.model
    assert str(spec.feedforward) == "squared_relu(power=3.0)"
    model = ablate.build_model(spec, 20, 20)
    assert type(model.encoder.layers[0].feed_forward).__name__ == "SquaredReLUFeedForward"
    ffn = model.encoder.layers[0].feed_forward
    x = torch.randn(2, 16)
    torch.testing.assert_close(ffn(x), ffn.w_2(torch.relu(ffn.w_1(x)) ** 3))
    out = model(torch.randint(1, 20, (2, 5)), torch.randint(1, 20, (2, 4)))
    assert out.shape == (2, 4, 20)
    assert ablate.load_experiment(path).baseline.spec.model == spec  # loading twice registers once
    assert "squared_relu" in FEEDFORWARD.parts


def test_plugin_through_the_cli(write):
    path = write("exp.yaml", f"name: plugged\nplugins: [{PLUGIN}]\nmodel: {{feedforward: squared_relu}}\n")
    result = cli("validate", str(path))
    assert result.returncode == 0, result.stderr
    assert "feedforward=squared_relu" not in result.stdout  # the baseline differs from nothing
    parts = cli("parts")
    assert "squared_relu" not in parts.stdout  # plugins are per experiment, not global


def test_broken_plugin_is_a_one_line_error(write):
    bad = write("bad_plugin.py", "raise RuntimeError('boom')\n")
    path = write("exp.yaml", f"name: x\nplugins: [{bad.name}, no_such_module_xyz]\n")
    result = cli("validate", str(path))
    assert result.returncode == 2
    assert result.stderr.strip() == f"{path}: plugins[0]: cannot import plugin 'bad_plugin.py': RuntimeError: boom"
