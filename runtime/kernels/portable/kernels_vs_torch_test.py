"""Single portable kernel calls against torch: on random shapes and float32 / int64 / bool values,
and on every node of small decoder LLMs (Llama, Qwen2, Mistral, Phi-3, Gemma, GPT-2).

Each case is one call of a registered kernel through call_kernels (the registry, the way Method
calls it), with every output planned larger than its result, so the kernel must compute its
output's shape and resize it: the shape and the values must equal torch's. This reaches what the
whole-model test (portable_torch_test) cannot export yet: Tensor[] and Tensor?[] arguments (cat,
index.Tensor), sizes known at run time (arange's end, size kernels) and dtype conversions. The LLM
cases export each model with a dynamic token count, run the decomposed graph in torch at several
lengths, and call the kernel of every node on the inputs torch gave that node.
"""

import dataclasses
import operator
import os
import random
import subprocess
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import pytest
import torch
import transformers
from edgeshare.exir.export import edge_decompositions

DTYPES = (torch.float32, torch.int64, torch.bool)
_CODES = {torch.float32: 6, torch.float16: 5, torch.int64: 4, torch.int8: 1, torch.bool: 11}
CASES_PER_FAMILY = 150

Expected = Union[torch.Tensor, int]


@dataclasses.dataclass(frozen=True)
class Call:
    """One kernel call.

    Attributes:
      op: the registered name, e.g. "aten::index.Tensor".
      args: the encoded arguments (see call_kernels.cc), outputs included.
      expected: torch's outputs, in order (an int for a size kernel's output).
    """

    op: str
    args: Tuple[str, ...]
    expected: Tuple[Expected, ...]


def t(x: torch.Tensor) -> str:
    """An input tensor."""
    values = (float(v) if x.dtype.is_floating_point else int(v) for v in x.flatten().tolist())
    return " ".join(["t", str(_CODES[x.dtype]), str(x.dim()), *map(str, x.shape), *map(repr, values)])


def out(like: torch.Tensor, extra: int = 1) -> str:
    """An output planned `extra` larger than `like` in every dim (its result must resize it)."""
    return " ".join(["o", str(_CODES[like.dtype]), str(like.dim()), *(str(s + extra) for s in like.shape)])


def i(v: int) -> str:
    return f"i {int(v)}"


def d(v: float) -> str:
    return f"d {float(v)!r}"


def n() -> str:
    return "n"


def il(values: Sequence[int]) -> str:
    return " ".join(["il", str(len(values)), *map(str, values)])


def word(value: str) -> str:
    """A String argument (one word)."""
    return f"s {value}"


def tl(items: Sequence[Optional[torch.Tensor]]) -> str:
    return " ".join(["tl", str(len(items)), *(n() if x is None else t(x) for x in items)])


def number(v: Union[int, float, bool]) -> str:
    """A Scalar argument as the exporter writes it (bools as ints: the same value to a kernel)."""
    return d(v) if isinstance(v, float) else i(int(v))


def _values(shape: Sequence[int], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    if dtype == torch.float32:
        return torch.randint(-6, 7, tuple(shape), generator=g).float() / 4
    if dtype == torch.int64:
        return torch.randint(-5, 6, tuple(shape), generator=g)
    return torch.randint(0, 2, tuple(shape), generator=g).bool()


class Gen:
    """Random shapes, dtypes and tensors for one family (seeded by its name)."""

    def __init__(self, seed: str) -> None:
        self.r = random.Random(seed)
        self.g = torch.Generator().manual_seed(self.r.randrange(1 << 30))

    def shape(self, min_rank: int = 0, max_rank: int = 3, max_size: int = 4) -> List[int]:
        return [self.r.randint(1, max_size) for _ in range(self.r.randint(min_rank, max_rank))]

    def tensor(self, shape: Sequence[int], dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        return _values(shape, dtype or self.r.choice(DTYPES), self.g)

    def broadcastable(self, shape: Sequence[int]) -> List[int]:
        """A shape that broadcasts with `shape`: a suffix of it with some sizes 1."""
        suffix = list(shape)[self.r.randint(0, len(shape)) :]
        return [s if self.r.random() < 0.6 else 1 for s in suffix]


def _index_calls(gen: Gen) -> List[Call]:
    calls = []
    while len(calls) < CASES_PER_FAMILY:
        shape = gen.shape(1, 4)
        x = gen.tensor(shape)
        b = gen.shape(0, 2, 3)  # the index tensors' broadcast shape
        entries: List[Optional[torch.Tensor]] = []
        for size in shape[: gen.r.randint(1, len(shape))]:
            if gen.r.random() < 0.35:
                entries.append(None)
                continue
            entries.append(torch.randint(-size, size, tuple(gen.broadcastable(b)), generator=gen.g))
        if all(e is None for e in entries):
            continue
        want = torch.ops.aten.index.Tensor(x, entries)
        calls.append(Call("aten::index.Tensor", (t(x), tl(entries), out(want)), (want,)))
    return calls


def _index_put_calls(gen: Gen) -> List[Call]:
    """aten::index_put with one index tensor (a cache write): values of the indexed region's shape
    (one copy per row) or broadcast to it; negative indices; accumulate on floats."""
    calls = []
    while len(calls) < CASES_PER_FAMILY:
        shape = gen.shape(1, 4, 5)
        dim = gen.r.randrange(len(shape))
        dtype = gen.r.choice(DTYPES)
        accumulate = dtype == torch.float32 and gen.r.random() < 0.25
        count = gen.r.randint(0, shape[dim])
        if accumulate:  # repeats add up
            index = torch.randint(-shape[dim], shape[dim], (count,), generator=gen.g)
        else:  # distinct rows: torch leaves which repeat wins unspecified
            index = torch.randperm(shape[dim], generator=gen.g)[:count] - gen.r.choice([0, shape[dim]])
        region = list(shape)
        region[dim] = count
        values = gen.tensor(region if gen.r.random() < 0.6 else gen.broadcastable(region), dtype)
        entries: List[Optional[torch.Tensor]] = [None] * dim + [index]
        x = gen.tensor(shape, dtype)
        want = torch.ops.aten.index_put(x, entries, values, accumulate)
        calls.append(Call("aten::index_put", (t(x), tl(entries), t(values), i(accumulate), out(want)), (want,)))
    return calls


def _cat_calls(gen: Gen) -> List[Call]:
    calls = []
    for _ in range(CASES_PER_FAMILY):
        shape = gen.shape(1, 3)
        dim = gen.r.randint(-len(shape), len(shape) - 1)
        dtype = gen.r.choice(DTYPES)
        items = []
        for _ in range(gen.r.randint(1, 3)):
            s = list(shape)
            s[dim] = gen.r.randint(0, 3)
            items.append(gen.tensor(s, dtype))
        if gen.r.random() < 0.3:  # the legacy empty tensor torch skips
            items.insert(gen.r.randint(0, len(items)), torch.zeros(0, dtype=dtype))
        want = torch.cat(items, dim)
        calls.append(Call("aten::cat", (tl(items), i(dim), out(want)), (want,)))
    return calls


def _operand(gen: Gen, shape: Sequence[int]) -> Union[torch.Tensor, int, float, bool]:
    """A tensor broadcastable with shape, a 0-dim tensor, or a number."""
    roll = gen.r.random()
    if roll < 0.6:
        return gen.tensor(gen.broadcastable(shape))
    if roll < 0.75:
        return gen.tensor([])
    return gen.r.choice([2, -1, 0.5, -1.25, True, 3])


def _arg(v: Union[torch.Tensor, int, float, bool]) -> str:
    return t(v) if isinstance(v, torch.Tensor) else number(v)


_BINARY: Dict[str, Tuple[Callable[..., torch.Tensor], bool]] = {
    "aten::add.Tensor": (torch.add, True),
    "aten::sub.Tensor": (torch.sub, True),
    "aten::mul.Tensor": (torch.mul, False),
    "aten::div.Tensor": (torch.div, False),
    "aten::maximum": (torch.maximum, False),
    "aten::minimum": (torch.minimum, False),
    "aten::eq.Tensor": (torch.eq, False),
    "aten::ne.Tensor": (torch.ne, False),
    "aten::lt.Tensor": (torch.lt, False),
    "aten::le.Tensor": (torch.le, False),
    "aten::gt.Tensor": (torch.gt, False),
    "aten::ge.Tensor": (torch.ge, False),
    "aten::bitwise_and.Tensor": (torch.bitwise_and, False),
    "aten::bitwise_or.Tensor": (torch.bitwise_or, False),
}


def _binary_calls(gen: Gen) -> List[Call]:
    calls = []
    while len(calls) < CASES_PER_FAMILY * 2:
        op = gen.r.choice(sorted(_BINARY))
        fn, has_alpha = _BINARY[op]
        self = gen.tensor(gen.shape())
        other = _operand(gen, self.shape)
        if not isinstance(other, torch.Tensor):
            op = op.replace(".Tensor", ".Scalar")
            if op in ("aten::maximum", "aten::minimum") or op.startswith("aten::bitwise"):
                continue
        alpha = 2 if self.dtype != torch.bool else True
        try:
            want = fn(self, other, alpha=alpha) if has_alpha else fn(self, other)
        except RuntimeError:  # a combination torch refuses (bool - bool, float & float, ...)
            continue
        if op.startswith("aten::div") and not isinstance(other, torch.Tensor) and other == 0:
            continue
        args = (t(self), _arg(other)) + ((number(alpha),) if has_alpha else ()) + (out(want),)
        calls.append(Call(op, args, (want,)))
    return calls


def _unary_calls(gen: Gen) -> List[Call]:
    calls = []
    for _ in range(CASES_PER_FAMILY):
        x = gen.tensor(gen.shape())
        cond = gen.tensor(gen.broadcastable(x.shape), torch.bool)
        other = gen.tensor(gen.broadcastable(x.shape))
        where = torch.where(cond, x, other)
        calls.append(Call("aten::where.self", (t(cond), t(x), t(other), out(where)), (where,)))
        calls.append(Call("aten::logical_not", (t(x), out(torch.logical_not(x))), (torch.logical_not(x),)))
        if x.dtype != torch.bool:
            calls.append(Call("aten::neg", (t(x), out(-x)), (-x,)))
        f = x.float()
        for op, fn in (("aten::cos", torch.cos), ("aten::sin", torch.sin), ("aten::sigmoid", torch.sigmoid)):
            calls.append(Call(op, (t(x), out(fn(f))), (fn(f),)))
    return calls


def _reduction_calls(gen: Gen) -> List[Call]:
    calls = []
    for _ in range(CASES_PER_FAMILY):
        x = gen.tensor(gen.shape(1))
        dim = gen.r.randint(-x.dim(), x.dim() - 1)
        keep = gen.r.random() < 0.5
        cumsum = torch.cumsum(x, dim)
        calls.append(Call("aten::cumsum", (t(x), i(dim), n(), out(cumsum)), (cumsum,)))
        anyd = torch.any(x, dim, keepdim=keep)
        calls.append(Call("aten::any.dim", (t(x), i(dim), i(keep), out(anyd)), (anyd,)))
        dims = sorted(gen.r.sample(range(x.dim()), gen.r.randint(1, x.dim())))
        anys = torch.ops.aten.any.dims(x, dims, keep)
        calls.append(Call("aten::any.dims", (t(x), il(dims), i(keep), out(anys)), (anys,)))
        calls.append(Call("aten::any", (t(x), out(torch.any(x))), (torch.any(x),)))
        total = torch.sum(x, dims, keepdim=keep)
        calls.append(Call("aten::sum.dim_IntList", (t(x), il(dims), i(keep), n(), out(total)), (total,)))
        mean = torch.mean(x.float(), dims, keepdim=keep)
        calls.append(Call("aten::mean.dim", (t(x.float()), il(dims), i(keep), n(), out(mean)), (mean,)))
    return calls


def _creation_calls(gen: Gen) -> List[Call]:
    calls = []
    for _ in range(CASES_PER_FAMILY):
        if gen.r.random() < 0.5:
            start, step = gen.r.randint(-10, 10), gen.r.choice([1, 2, 3, -1, -4])
            end = start + step * gen.r.randint(0, 12) + gen.r.choice([0, 1]) * (1 if step > 0 else -1)
        else:
            start, step = round(gen.r.uniform(-5, 5), 2), gen.r.choice([0.1, 0.25, 0.3, -0.7, 1.5])
            end = round(start + step * gen.r.uniform(0, 20), 3)
        want = torch.arange(start, end, step)
        rest = (n(), n(), n(), n(), out(want, 3))
        calls.append(Call("aten::arange.start_step", (number(start), number(end), number(step)) + rest, (want,)))
        if step == 1:
            calls.append(Call("aten::arange.start", (number(start), number(end)) + rest, (want,)))
            if start == 0:
                calls.append(Call("aten::arange", (number(end),) + rest, (want,)))
        x = gen.tensor(gen.shape())
        value = gen.r.choice([0, 1, -2, 0.5, True])
        like = torch.full_like(x, value)
        calls.append(Call("aten::full_like", (t(x), number(value), n(), n(), n(), n(), n(), out(like)), (like,)))
        full = torch.full(x.shape, value)
        calls.append(Call("aten::full", (il(x.shape), number(value), n(), n(), n(), n(), out(full)), (full,)))
        scalar = torch.scalar_tensor(value, dtype=gen.r.choice(DTYPES))
        calls.append(Call("aten::scalar_tensor", (number(value), n(), n(), n(), n(), out(scalar, 0)), (scalar,)))
        for dtype in DTYPES:
            y = x * 3.7 if x.dtype == torch.float32 else x
            conv = y.to(dtype)
            calls.append(Call("aten::_to_copy", (t(y), n(), n(), n(), n(), i(0), n(), out(conv)), (conv,)))
    return calls


def _shape_calls(gen: Gen) -> List[Call]:
    calls = []
    for _ in range(CASES_PER_FAMILY):
        x = gen.tensor(gen.shape(1, 4))
        infer = gen.r.randrange(x.dim())
        sizes = [-1 if k == infer else s for k, s in enumerate(x.shape)]
        view = x.view(sizes)
        calls.append(Call("aten::view", (t(x), il(sizes), out(view)), (view,)))
        perm = list(range(x.dim()))
        gen.r.shuffle(perm)
        calls.append(Call("aten::permute", (t(x), il(perm), out(x.permute(perm))), (x.permute(perm).contiguous(),)))
        dim = gen.r.randint(-x.dim(), x.dim() - 1)
        start, end = gen.r.randint(-5, 5), gen.r.choice([gen.r.randint(-5, 5), 2**63 - 1])
        step = gen.r.randint(1, 3)
        sliced = torch.ops.aten.slice.Tensor(x, dim, start, end, step)
        args = (t(x), i(dim), i(start), i(end), i(step), out(sliced))
        calls.append(Call("aten::slice.Tensor", args, (sliced.contiguous(),)))
        unsq = x.unsqueeze(dim)
        calls.append(Call("aten::unsqueeze", (t(x), i(dim), out(unsq)), (unsq,)))
        lead = gen.shape(0, 1)
        target = lead + [s if s != 1 or gen.r.random() < 0.5 else gen.r.randint(1, 3) for s in x.shape]
        wanted = lead + [-1 if gen.r.random() < 0.3 else s for s in target[len(lead) :]]
        expanded = x.expand(wanted)
        calls.append(Call("aten::expand", (t(x), il(wanted), i(0), out(expanded)), (expanded.contiguous(),)))
        pieces = [gen.r.randint(0, x.shape[dim]) for _ in range(2)]
        pieces = [min(pieces), x.shape[dim] - min(pieces)]
        split = torch.split(x, pieces, dim)
        outs = tuple(out(p) for p in split)
        calls.append(
            Call("aten::split_with_sizes", (t(x), il(pieces), i(dim)) + outs, tuple(p.contiguous() for p in split))
        )
        table = gen.tensor([5, gen.r.randint(1, 3)])
        ids = torch.randint(0, 5, tuple(gen.shape(0, 2)), generator=gen.g)
        emb = torch.nn.functional.embedding(ids, table.float()).to(table.dtype)
        calls.append(Call("aten::embedding", (t(table), t(ids), i(-1), i(0), i(0), out(emb)), (emb,)))
    return calls


_SYM: Dict[str, Callable[..., int]] = {
    "sym::add": operator.add,
    "sym::sub": operator.sub,
    "sym::mul": operator.mul,
    "sym::floordiv": operator.floordiv,
    "sym::mod": operator.mod,
    "sym::max": max,
    "sym::min": min,
}


def _size_calls(gen: Gen) -> List[Call]:
    calls = []
    for _ in range(CASES_PER_FAMILY):
        x = gen.tensor(gen.shape(1))
        dim = gen.r.randint(-x.dim(), x.dim() - 1)
        calls.append(Call("aten::sym_size.int", (t(x), i(dim), "io"), (x.shape[dim],)))
        a, b = gen.r.randint(-300, 300), gen.r.choice([gen.r.randint(-9, -1), gen.r.randint(1, 9)])
        op = gen.r.choice(sorted(_SYM))
        calls.append(Call(op, (i(a), i(b), "io"), (_SYM[op](a, b),)))
        calls.append(Call("sym::neg", (i(a), "io"), (-a,)))
    return calls


def _attention_calls(gen: Gen) -> List[Call]:
    """edgeshare::cached_attention against exir's eager definition: grouped heads, positions past
    the filled ones, sliding windows, soft caps, head sizes with and without a vector tail."""
    from edgeshare.exir.attention import cached_attention  # noqa: PLC0415 (defines the operator)

    calls = []
    for _ in range(CASES_PER_FAMILY // 3):
        kv_heads = gen.r.choice([1, 2])
        heads = kv_heads * gen.r.choice([1, 2, 3])
        head_dim = gen.r.choice([1, 3, 8, 16, 17, 40])
        positions = gen.r.randint(1, 80)
        rows = gen.r.randint(1, min(positions, 9))
        start = gen.r.randint(0, positions - rows)
        scale = gen.r.choice([head_dim**-0.5, 0.3])
        softcap = gen.r.choice([0.0, 0.0, 5.0])
        window = gen.r.choice([0, 0, gen.r.randint(1, positions)])
        q = gen.tensor([1, heads, rows, head_dim], torch.float32)
        k = gen.tensor([1, kv_heads, positions, head_dim], torch.float32)
        v = gen.tensor([1, kv_heads, positions, head_dim], torch.float32)
        start_pos = torch.tensor(start, dtype=torch.int64)
        want = cached_attention(q, k, v, start_pos, scale, softcap, window)
        args = (t(q), t(k), t(v), t(start_pos), d(scale), d(softcap), i(window), out(want))
        calls.append(Call("edgeshare::cached_attention", args, (want,)))
    return calls


def _batched_attention_calls(gen: Gen) -> List[Call]:
    """edgeshare::batched_attention against exir's eager definition: rows of several slots at
    unrelated positions in one call, grouped heads, sliding windows, soft caps, odd head sizes."""
    from edgeshare.exir.batched_ops import batched_attention  # noqa: PLC0415 (defines the operator)

    calls = []
    for _ in range(CASES_PER_FAMILY // 3):
        kv_heads = gen.r.choice([1, 2])
        heads = kv_heads * gen.r.choice([1, 2, 3])
        head_dim = gen.r.choice([1, 3, 8, 16, 17, 40])
        slots = gen.r.randint(1, 4)
        max_seq_len = gen.r.randint(1, 40)
        rows = gen.r.randint(1, 9)
        scale = gen.r.choice([head_dim**-0.5, 0.3])
        softcap = gen.r.choice([0.0, 0.0, 5.0])
        window = gen.r.choice([0, 0, gen.r.randint(1, max_seq_len)])
        q = gen.tensor([1, heads, rows, head_dim], torch.float32)
        k = gen.tensor([kv_heads, slots * max_seq_len, head_dim], torch.float32)
        v = gen.tensor([kv_heads, slots * max_seq_len, head_dim], torch.float32)
        slot = torch.tensor([gen.r.randrange(slots) for _ in range(rows)], dtype=torch.int64)
        position = torch.tensor([gen.r.randrange(max_seq_len) for _ in range(rows)], dtype=torch.int64)
        want = batched_attention(q, k, v, slot, position, max_seq_len, scale, softcap, window)
        args = (t(q), t(k), t(v), t(slot), t(position), i(max_seq_len), d(scale), d(softcap), i(window), out(want))
        calls.append(Call("edgeshare::batched_attention", args, (want,)))
    return calls


def _batch_rows_calls(gen: Gen) -> List[Call]:
    """edgeshare::batch_rows: each row's cache row, for rows within the bounds."""
    from edgeshare.exir.batched_ops import batch_rows  # noqa: PLC0415 (defines the operator)

    calls = []
    for _ in range(CASES_PER_FAMILY // 5):
        slots, max_seq_len, adapter_slots = gen.r.randint(1, 5), gen.r.randint(1, 50), gen.r.randint(1, 9)
        rows = gen.r.randint(1, 12)
        slot = torch.tensor([gen.r.randrange(slots) for _ in range(rows)], dtype=torch.int64)
        position = torch.tensor([gen.r.randrange(max_seq_len) for _ in range(rows)], dtype=torch.int64)
        adapter = torch.tensor([gen.r.randrange(-1, adapter_slots) for _ in range(rows)], dtype=torch.int64)
        want = batch_rows(slot, position, adapter, slots, max_seq_len, adapter_slots)
        args = (t(slot), t(position), t(adapter), i(slots), i(max_seq_len), i(adapter_slots), out(want))
        calls.append(Call("edgeshare::batch_rows", args, (want,)))
    return calls


@dataclasses.dataclass(frozen=True)
class _LoraCase:
    """One low-rank call's shape and rows: x [*leading, rows, in] and each row's adapter slot (-1:
    none) in runs of one adapter (one product) and single rows."""

    slots: int
    rank: int
    in_channels: int
    out_channels: int
    x: torch.Tensor
    adapters: torch.Tensor


def _lora_case(gen: Gen) -> _LoraCase:
    slots = gen.r.randint(1, 4)
    rank = gen.r.choice([1, 4, 16, 300 // 2])
    rows = gen.r.randint(1, 40)
    in_channels = gen.r.choice([1, 5, 16, 33])
    out_channels = gen.r.choice([1, 7, 16, 40])
    leading = gen.r.choice([[], [1], [2]])
    x = gen.tensor([*leading, rows, in_channels], torch.float32)
    runs: List[int] = []
    while len(runs) < rows:
        runs += [gen.r.randrange(-1, slots)] * gen.r.choice([1, 1, 3, 30])
    return _LoraCase(slots, rank, in_channels, out_channels, x, torch.tensor(runs[:rows], dtype=torch.int64))


def _lora_bgmv_calls(gen: Gen) -> List[Call]:
    """edgeshare::lora_bgmv against exir's eager definition: runs of rows on one adapter (one
    product), single rows, rows on no adapter, leading dims, ranks past the stack chunk's rows,
    float32 and float16 factors (widened as they are read)."""
    from edgeshare.exir.batched_ops import lora_bgmv  # noqa: PLC0415 (defines the operator)

    calls = []
    for _ in range(CASES_PER_FAMILY // 3):
        c = _lora_case(gen)
        factors = gen.r.choice([torch.float32, torch.float16])
        a = gen.tensor([c.slots, c.rank, c.in_channels], torch.float32).to(factors)
        b = gen.tensor([c.slots, c.rank, c.out_channels], torch.float32).to(factors)
        want = lora_bgmv(c.x, a, b, c.adapters)
        calls.append(Call("edgeshare::lora_bgmv", (t(c.x), t(a), t(b), t(c.adapters), out(want)), (want,)))
    return calls


def _lora_bgmv_q8_calls(gen: Gen) -> List[Call]:
    """edgeshare::lora_bgmv_q8 against exir's eager definition: int8 factors with a float32 scale
    per row of a and per output of b, over the same mixes of runs, ranks and shapes as lora_bgmv's."""
    from edgeshare.exir.batched_ops import lora_bgmv_q8  # noqa: PLC0415 (defines the operator)

    def int8s(shape: List[int]) -> torch.Tensor:
        count = int(torch.Size(shape).numel())
        return torch.tensor([gen.r.randint(-127, 127) for _ in range(count)], dtype=torch.int8).view(shape)

    calls = []
    for _ in range(CASES_PER_FAMILY // 3):
        c = _lora_case(gen)
        a, b = int8s([c.slots, c.rank, c.in_channels]), int8s([c.slots, c.rank, c.out_channels])
        a_scales = gen.tensor([c.slots, c.rank], torch.float32).abs() / 100
        b_scales = gen.tensor([c.slots, c.out_channels], torch.float32).abs() / 100
        want = lora_bgmv_q8(c.x, a, a_scales, b, b_scales, c.adapters)
        args = (t(c.x), t(a), t(a_scales), t(b), t(b_scales), t(c.adapters), out(want))
        calls.append(Call("edgeshare::lora_bgmv_q8", args, (want,)))
    return calls


FAMILIES: Dict[str, Callable[[Gen], List[Call]]] = {
    "attention": _attention_calls,
    "batch_rows": _batch_rows_calls,
    "batched_attention": _batched_attention_calls,
    "lora_bgmv": _lora_bgmv_calls,
    "lora_bgmv_q8": _lora_bgmv_q8_calls,
    "index": _index_calls,
    "index_put": _index_put_calls,
    "cat": _cat_calls,
    "binary": _binary_calls,
    "unary_where": _unary_calls,
    "reductions": _reduction_calls,
    "creation": _creation_calls,
    "shapes": _shape_calls,
    "sizes": _size_calls,
}


def _run(calls: Sequence[Call]) -> List[str]:
    text = "".join(f"{c.op} {' '.join(c.args)} end\n" for c in calls)
    proc = subprocess.run([os.environ["CALL_KERNELS"]], input=text, capture_output=True, text=True, check=True)
    lines = proc.stdout.splitlines()
    assert len(lines) == len(calls), proc.stderr
    return lines


def _mismatch(call: Call, line: str) -> Optional[str]:
    """Why the kernel's printed outputs differ from torch's, or None."""
    words = line.split()
    if words[0] != "ok":
        return line
    pos = 1
    for k, want in enumerate(call.expected):
        if isinstance(want, int):
            got_int = int(words[pos + 1])
            pos += 2
            if got_int != want:
                return f"output {k}: {got_int}, torch {want}"
            continue
        rank = int(words[pos])
        shape = tuple(int(w) for w in words[pos + 1 : pos + 1 + rank])
        count = 1
        for s in shape:
            count *= s
        values = words[pos + 1 + rank : pos + 1 + rank + count]
        pos += 1 + rank + count
        if shape != tuple(want.shape):
            return f"output {k}: shape {shape}, torch {tuple(want.shape)}"
        got = torch.tensor([float(v) for v in values], dtype=torch.float64).reshape(shape)
        if not torch.allclose(got, want.double(), rtol=1e-5, atol=1e-5, equal_nan=True):
            return f"output {k}: {got.flatten()[:8].tolist()}, torch {want.flatten()[:8].tolist()}"
    return None


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_kernel_calls_match_torch(family: str) -> None:
    calls = FAMILIES[family](Gen(family))
    ops = {c.op for c in calls}
    wrong = []
    for call, line in zip(calls, _run(calls)):
        why = _mismatch(call, line)
        if why is not None:
            wrong.append(f"{call.op} {' '.join(call.args)[:300]}: {why}")
    assert not wrong, f"{len(wrong)} of {len(calls)} calls ({sorted(ops)}) differ from torch:\n" + "\n".join(wrong[:20])


_SYM_NODES: Dict[Callable[..., Any], str] = {
    operator.add: "sym::add",
    operator.sub: "sym::sub",
    operator.mul: "sym::mul",
    operator.floordiv: "sym::floordiv",
    operator.mod: "sym::mod",
    operator.neg: "sym::neg",
}

# Checked by the exporter and dropped, not run.
_NOT_KERNELS = {"aten::_assert_tensor_metadata"}


def _encode(value: Any, env: Dict[torch.fx.Node, Any]) -> str:
    """A node argument as call_kernels reads it, with the values torch computed for its inputs."""
    if isinstance(value, torch.fx.Node):
        value = env[value]
    if isinstance(value, torch.Tensor):
        return t(value)
    if isinstance(value, (list, tuple)):
        items = [env[v] if isinstance(v, torch.fx.Node) else v for v in value]
        if any(x is None or isinstance(x, torch.Tensor) for x in items):
            return tl(items)
        return il([int(x) for x in items])  # SymInts are ints by now, as Method materialises them
    if value is None or isinstance(value, (torch.device, torch.layout, torch.memory_format)):
        return n()
    if isinstance(value, torch.dtype):
        return i(_CODES[value])
    if isinstance(value, (bool, int)):
        return i(int(value))
    if isinstance(value, float):
        return d(value)
    if isinstance(value, str):
        return word(value)
    raise TypeError(f"no encoding for {value!r}")


def _node_calls(gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor]) -> List[Call]:
    """One call per kernel node of gm, on the values torch computes for inputs."""
    env: Dict[torch.fx.Node, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node: torch.fx.Node) -> Any:  # noqa: D102
            env[node] = super().run_node(node)
            return env[node]

    Recorder(gm).run(*inputs)
    calls = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        value = env[node]
        if node.target in _SYM_NODES:
            args = tuple(_encode(a, env) for a in node.args)
            calls.append(Call(_SYM_NODES[node.target], args + ("io",), (int(value),)))
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None:  # operator.getitem of a multi-output node
            continue
        name = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
        if name in _NOT_KERNELS:
            continue
        args = []
        for k, a in enumerate(schema.arguments):
            if k < len(node.args):
                arg = node.args[k]
            else:
                arg = node.kwargs.get(a.name, a.default_value if a.has_default_value() else None)
            args.append(_encode(arg, env))
        if name == "aten::sym_size.int":
            calls.append(Call(name, tuple(args) + ("io",), (int(value),)))
            continue
        outs = list(value) if isinstance(value, (tuple, list)) else [value]
        calls.append(Call(name, tuple(args + [out(o) for o in outs]), tuple(o.contiguous() for o in outs)))
    return calls


_LLM_SIZES = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
)

LLMS: Dict[str, Callable[[], Any]] = {
    "llama": lambda: transformers.LlamaConfig(**_LLM_SIZES),
    "qwen2": lambda: transformers.Qwen2Config(**_LLM_SIZES),
    "mistral": lambda: transformers.MistralConfig(**_LLM_SIZES, sliding_window=4),
    "phi3": lambda: transformers.Phi3Config(**_LLM_SIZES, pad_token_id=0),
    "gemma": lambda: transformers.GemmaConfig(**_LLM_SIZES, head_dim=8),
    "gpt2": lambda: transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=128),
}


class _Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.model(input_ids=input_ids, use_cache=False).logits


@pytest.mark.parametrize("family", sorted(LLMS))
def test_every_node_of_a_decoder_llm_matches_torch(family: str) -> None:
    torch.manual_seed(0)
    model = _Logits(transformers.AutoModelForCausalLM.from_config(LLMS[family]()).eval())
    length = torch.export.Dim("length", min=1, max=128)
    ids = torch.randint(0, 64, (1, 8))
    ep = torch.export.export(model, (ids,), dynamic_shapes=({1: length},))
    gm = ep.run_decompositions(edge_decompositions()).module()
    wrong = []
    for tokens in (8, 3, 1):
        calls = _node_calls(gm, [torch.randint(0, 64, (1, tokens))])
        for call, line in zip(calls, _run(calls)):
            why = _mismatch(call, line)
            if why is not None:
                wrong.append(f"T={tokens} {call.op}: {why}")
    assert {c.op for c in calls} >= {"aten::index.Tensor", "aten::cat", "aten::sym_size.int"}
    assert not wrong, f"{family}: " + "\n".join(wrong[:20])


def test_a_result_past_the_planned_capacity_is_an_error_naming_the_op() -> None:
    x = torch.ones(3, 2)
    (line,) = _run([Call("aten::cumsum", (t(x), i(0), n(), out(x, -1)), (x,))])
    assert line.startswith("error ") and "aten::cumsum" in line, line


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
