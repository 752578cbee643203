"""to_backend: every partition of every method reaches preprocess_multimethod once, with a tiny
non-XNNPACK backend that only implements preprocess."""

from typing import List

import pytest
import torch
from edgeshare.exir import (
    BackendDetails,
    CompileSpec,
    DelegationSpec,
    LoweringError,
    NamedDataStore,
    Partitioner,
    PartitionResult,
    PreprocessResult,
    to_edge,
)
from edgeshare.exir._serialize import deserialize_pte
from edgeshare.exir.partition import tag_supported_nodes
from torch import nn

CALLS: List[str] = []


class NegBackend(BackendDetails):
    """Runs aten.neg; stores one opaque blob per partition."""

    @classmethod
    def preprocess(cls, edge_program, compile_specs):
        CALLS.append("preprocess")
        store = NamedDataStore()
        store.add_named_data("neg/blob", b"opaque")
        ops = [str(n.target) for n in edge_program.graph.nodes if n.op == "call_function"]
        return PreprocessResult(",".join(ops).encode(), None, store.get_named_data_store_output())


class CountingNegBackend(NegBackend):
    @classmethod
    def preprocess_multimethod(cls, edge_programs, compile_specs):
        CALLS.append("multimethod:" + ",".join(f"{m}={len(p)}" for m, p in sorted(edge_programs.items())))
        return super().preprocess_multimethod(edge_programs, compile_specs)


class NegPartitioner(Partitioner):
    def __init__(self, backend_id="NegBackend", specs=None):
        self.backend_id = backend_id
        self.specs = specs or [CompileSpec("k", b"v")]

    def partition(self, ep):
        tags = tag_supported_nodes(ep, lambda n: n.target == torch.ops.aten.neg.default, "neg_")
        return PartitionResult(ep, {t: DelegationSpec(self.backend_id, self.specs) for t in tags})


class M(nn.Module):
    def forward(self, x):
        return -(torch.sin(-x))  # two neg partitions split by sin


def _edge(methods=("forward", "other")):
    ep = torch.export.export(M(), (torch.randn(3),))
    return to_edge({m: ep for m in methods})


def test_every_partition_of_every_method_goes_to_one_multimethod_call():
    CALLS.clear()
    lowered = _edge().to_backend(NegPartitioner("CountingNegBackend"))
    assert CALLS == ["multimethod:forward=2,other=2"] + ["preprocess"] * 4
    et = lowered.to_executorch()
    pte = deserialize_pte(et.buffer)
    for plan in pte.program.executionPlans:
        assert [d.id for d in plan.delegates] == [b"CountingNegBackend"] * 2
        assert [(o.name, o.overload) for o in plan.operators] == [(b"aten::sin", b"")]
        assert plan.delegates[0].compileSpecs[0].key == b"k"
    assert list(pte.named_data) == ["neg/blob"]  # stored once across methods and partitions


def test_lowered_program_still_runs_eagerly():
    lowered = _edge(("forward",)).to_backend(NegPartitioner())
    ep = lowered.exported_program()
    call = next(n for n in ep.graph.nodes if n.op == "call_function" and n.name.startswith("call_delegate"))
    module = getattr(ep.graph_module, call.args[0].target)
    x = torch.randn(3)
    assert torch.allclose(module.original_module.module()(x)[0], -x)


class BadCountBackend(BackendDetails):
    @classmethod
    def preprocess_multimethod(cls, edge_programs, compile_specs):
        return {m: [] for m in edge_programs}


def test_result_count_mismatch_names_the_method():
    with pytest.raises(LoweringError, match="method 'forward'"):
        _edge(("forward",)).to_backend(NegPartitioner("BadCountBackend"))


def test_default_multimethod_checks_compile_spec_counts():
    ep = _edge(("forward",)).exported_program()
    with pytest.raises(LoweringError, match="method 'forward'.*1 partitions but 2"):
        NegBackend.preprocess_multimethod({"forward": [ep]}, {"forward": [[], []]})


def test_unknown_backend_is_an_error():
    with pytest.raises(LoweringError, match="no backend 'Nope'"):
        _edge(("forward",)).to_backend(NegPartitioner("Nope"))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
