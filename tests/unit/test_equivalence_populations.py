"""How the equivalence family lays grads out and judges the non-bitwise shape, without ranks."""

from __future__ import annotations

import pytest
import torch

from harness.contracts import equivalence
from harness.contracts.equivalence import LAYOUTS, FakeParameter, Population


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("numel", [0, 1, 2, 6, 7])
def test_a_layout_keeps_the_values_and_shape_the_param_has(layout: str, numel: int) -> None:
    spec = FakeParameter("decoder.layers.0.input_layernorm.weight", numel, "bf16", "grad", layout=layout)
    values = equivalence._values(spec, 3, 1, 0)
    grad = equivalence._laid_out(values, spec)
    assert grad.shape == equivalence._shape(spec)
    assert torch.equal(grad.reshape(-1), values)
    if layout != "contiguous" and numel >= 4 and (layout == "strided" or numel % 2 == 0):
        assert not grad.is_contiguous()
    assert torch.equal(equivalence._bits(grad), equivalence._bits(values))


def _population(*specs: FakeParameter) -> Population:
    return Population(chunks=(specs,), sequence_parallel=True, qk_layernorm=False, seed=5)


def test_the_truth_takes_params_and_ops_from_what_upstream_did() -> None:
    summed = FakeParameter("decoder.layers.0.input_layernorm.weight", 5, "fp32", "grad")
    averaged = FakeParameter("decoder.layers.1.some_new_rule.weight", 5, "fp32", "grad")
    untouched = FakeParameter("decoder.layers.2.mlp.linear_fc1.weight", 5, "fp32", "grad")
    population = _population(summed, averaged, untouched)
    ranks = [0, 1, 2, 3]

    def terms(spec: FakeParameter, index: int) -> torch.Tensor:
        return torch.stack([equivalence._values(spec, population.seed, r, index).double() for r in ranks])

    upstream = {
        "0:" + summed.name: terms(summed, 0).sum(0).float(),
        "0:" + averaged.name: terms(averaged, 1).mean(0).float(),
    }
    truth = equivalence._float64_truth(population, ranks, upstream)
    assert set(truth) == set(upstream)
    assert torch.allclose(truth["0:" + summed.name][0], terms(summed, 0).sum(0))
    assert torch.allclose(truth["0:" + averaged.name][0], terms(averaged, 1).mean(0))
    exact, bound = truth["0:" + averaged.name]
    assert bound.shape == exact.shape and bool((bound > 0).all())
