"""edgeshare::linear_stored and store_open_linears: an open adapter weight stored in an adapter
row is read back as the row rounds it; only an open weight read as a linear's weight is rewritten."""

import sys

import pytest
import torch
from edgeshare.exir.fc_formats import F16W, QC8W
from edgeshare.exir.stored_linear import linear_stored, stored_entry


@pytest.mark.parametrize("fmt", [F16W, QC8W], ids=lambda f: f.scheme)
def test_linear_stored_computes_with_the_weight_as_the_row_rounds_it(fmt):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 16, generator=g)
    x = torch.randn(3, 16, generator=g)
    values, scales = fmt.stored(w)
    assert values.dtype == fmt.dtype and (scales is None) == (not fmt.quantized)
    got = linear_stored(x, values, scales)
    want = torch.nn.functional.linear(x, fmt.rounded(w))
    assert torch.allclose(got, want, rtol=0, atol=1e-6)
    assert torch.equal(stored_entry(w, fmt.scheme, "values"), values)


def test_stored_entry_refuses_scales_of_an_unquantized_row():
    with pytest.raises(ValueError, match="f16w stores no scales"):
        stored_entry(torch.ones(2, 2), F16W.scheme, "scales")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
