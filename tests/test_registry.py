"""The registry: registration rules, part choices in both forms, and plugins."""

import subprocess
import sys

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


def test_every_declared_part_is_built_by_one_class_that_subclasses_its_declaration():
    """parts/declared.py names what a spec may write, the modules build it: no declaration without a class, no
    built-in class without a declaration, and the class's parameters and checks are the declaration's."""
    import ablate.model.transformer  # noqa: F401  (imports every module of built-in parts)
    from ablate.parts import declared

    slots = [s for s in REGISTRY.values() if s.base.__module__ == declared.__name__]
    assert {s.name for s in slots} == {"positions", "projection", "scaling", "embedding_scale", "tying", "feedforward",
                                       "norm", "norm_placement"}  # fmt: skip
    for s in slots:
        for name, declaration in s.declared.items():
            if declaration.__module__ != declared.__name__:
                continue  # a plugin's part, registered by another test of this session
            built = s[name]
            assert built is not declaration and issubclass(built, declaration) and issubclass(built, nn.Module)
            assert built.Params is declaration.Params and built.check.__func__ is declaration.check.__func__
            assert (built.name, built.slot) == (name, s.name)
            assert built.description() == declaration.description()


def test_a_declared_part_s_class_must_subclass_the_declaration_and_keep_its_params():
    widths = Slot("feedforward", FeedForward, "feed-forward parts of this test")

    @widths.declare("wide")
    class Wide(FeedForward):
        """A declaration: the width factor a spec may set."""

        class Params(PartParams):
            factor: float = 2.0

    with pytest.raises(TypeError, match="must subclass its declaration"):

        @widths.register("wide")
        class NotIt(ReLUFeedForward):
            pass

    with pytest.raises(TypeError, match="redefines Params: a declared part's are its declaration's"):

        @widths.register("wide")
        class Again(Wide, ReLUFeedForward):
            class Params(PartParams):
                factor: float = 3.0

    assert widths.parse({"name": "wide", "factor": 4.0}).params.factor == 4.0  # validates with no class built
    with pytest.raises(LookupError, match=r"'wide' is declared .* but no class that builds it is registered"):
        widths["wide"]

    @widths.register("wide")
    class Built(Wide, ReLUFeedForward):
        pass

    assert widths["wide"] is Built and widths.declaration("wide") is Wide and list(widths) == [Wide]


def test_a_spec_validates_without_torch_parts_checks_and_joint_vocabulary_included():
    """RunSpec and its sections, their parts' parameters and checks, in a fresh interpreter that never imports torch."""
    code = """
import sys
from ablate.errors import SpecError
from ablate.train.spec import RunSpec

spec = RunSpec.model_validate({"model": {"positions": {"name": "rotary", "base": 500.0}, "scaling": "qk_norm"},
                               "training": {"max_steps": 10}})
assert str(spec.model.positions) == "rotary(base=500.0)", spec.model.positions
for bad, says in [({"model": {"positions": "rotary", "d_model": 30, "heads": 2}}, "needs an even d_k"),
                  ({"model": {"tying": "all"}, "tokenizer": {"joint": False}}, "needs tokenizer.joint: true"),
                  ({"model": {"projection": "shared_per_head", "d_k": 16}}, "needs heads * d_k = d_model")]:
    try:
        RunSpec.model_validate({**bad, "training": {"max_steps": 10}})
    except Exception as error:
        assert says in str(error), error
    else:
        raise AssertionError(f"{bad} validated")
assert "torch" not in sys.modules, "validating a spec imported torch"
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_class_that_builds_a_part_must_subclass_the_slot_s_nn_module_not_its_declarations_base():
    """Both ablate.parts.declared and ablate.parts.feedforward hold a FeedForward: a plugin that subclasses the
    torch-free one would validate and then fail to build, so registering it fails, naming the module to use."""
    from ablate.parts import declared

    assert FEEDFORWARD.base is declared.FeedForward and FEEDFORWARD.builder is FeedForward
    with pytest.raises(TypeError, match=r"must subclass FeedForward \(ablate\.parts\.feedforward\)"):

        @FEEDFORWARD.register("declared_only")
        class DeclaredOnly(declared.FeedForward):
            """A declaration's base alone: no weights, no forward."""

    assert "declared_only" not in FEEDFORWARD.declared and "declared_only" not in FEEDFORWARD.parts
    with pytest.raises(TypeError, match="must subclass the slot's base FeedForward"):
        FEEDFORWARD.builds(nn.Module)
