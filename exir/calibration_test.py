"""Calibration: each Linear input's mean square over the text and the int4 scale search weighing it
(the text's tokens and export_lora --calibration end to end: tools/export_lora_calibration_test.py)."""

import sys

import pytest
import torch
from edgeshare.exir.calibration import importance_from_ids
from edgeshare.exir.quantize import quantize_qc4w, unpack_int4
from torch import nn


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(10, 4)
        self.first = nn.Linear(4, 3)
        self.second = nn.Linear(3, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(self.embed(ids))))


def test_importance_is_each_linear_inputs_mean_square_over_every_window():
    model = _Tiny()
    ids = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 5, 3])
    importance = importance_from_ids(model, ids, ctx=4)  # windows of 4, 4 and 2 tokens
    with torch.no_grad():
        x = model.embed(ids)
        h = torch.relu(model.first(x))
    assert sorted(importance) == ["first.weight", "second.weight"]
    assert importance["first.weight"].dtype == torch.float32
    torch.testing.assert_close(importance["first.weight"], (x * x).mean(dim=0))
    torch.testing.assert_close(importance["second.weight"], (h * h).mean(dim=0))
    assert model.training  # left as it was found


def _weighted_error(w: torch.Tensor, importance: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor) -> float:
    values = unpack_int4(packed).to(torch.float32) * scales.to(torch.float32).repeat_interleave(32, dim=1)
    return float((importance * (w - values) ** 2).sum())


def test_the_int4_search_spends_its_error_where_inputs_are_small():
    g = torch.Generator().manual_seed(3)
    w = torch.randn(48, 128, generator=g)
    importance = torch.full((128,), 0.01)
    importance[::5] = 100.0  # a few inputs carry most of the signal, as outlier channels do
    plain = quantize_qc4w(w, 32)
    weighed = quantize_qc4w(w, 32, importance)
    assert _weighted_error(w, importance, *weighed) < 0.8 * _weighted_error(w, importance, *plain)


@pytest.mark.parametrize(
    "importance, message",
    [
        (torch.ones(64), "importance must be float32 [128]"),
        (torch.ones(128, dtype=torch.float64), "importance must be float32 [128]"),
        (torch.full((128,), -1.0), "finite and >= 0"),
        (torch.full((128,), float("nan")), "finite and >= 0"),
    ],
)
def test_a_bad_importance_is_refused(importance, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        quantize_qc4w(torch.randn(4, 128), 32, importance)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
