"""A tiny numpy-backed stand-in for the parts of torch the rehearsal models touch.

Rehearsal modules import it as ``torch`` (``from sglang.srt import _torch as torch``). It is not a
top-level module, so it never shadows a real torch. Shapes print exactly like torch
(``torch.Size([1, 192])``) because patches print them.
"""

from __future__ import annotations

import builtins
import contextlib
import os

import numpy as np


class dtype:
    def __init__(self, name: str, numpy_dtype):
        self.name = name
        self.numpy = np.dtype(numpy_dtype)

    def __repr__(self) -> str:
        return f"torch.{self.name}"


float16 = half = dtype("float16", np.float16)
bfloat16 = dtype("bfloat16", np.float32)  # numpy has no bfloat16; computed in float32
float32 = float = dtype("float32", np.float32)
float64 = double = dtype("float64", np.float64)
int32 = dtype("int32", np.int32)
int64 = long = dtype("int64", np.int64)
bool = dtype("bool", np.bool_)  # noqa: A001 - torch.bool
_BY_NUMPY = {d.numpy: d for d in (float16, float32, float64, int32, int64, bool)}


class Size(tuple):
    def __repr__(self) -> str:
        return f"torch.Size([{', '.join(str(n) for n in self)}])"

    __str__ = __repr__


class Tensor:
    __slots__ = ("data", "__dict__")

    def __init__(self, data):
        self.data = data.data if isinstance(data, Tensor) else np.asarray(data)

    @property
    def shape(self) -> Size:
        return Size(self.data.shape)

    @property
    def dtype(self) -> dtype:
        return _BY_NUMPY.get(self.data.dtype, float32)

    @property
    def T(self) -> Tensor:
        return Tensor(self.data.T)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.data.shape[dim]

    def dim(self) -> int:
        return self.data.ndim

    def numel(self) -> int:
        return int(self.data.size)

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self):
        return (Tensor(row) for row in self.data)

    def __getitem__(self, index):
        return Tensor(self.data[_raw(index)])

    def __setitem__(self, index, value):
        self.data[_raw(index)] = _raw(value)

    def __add__(self, other):
        return Tensor(self.data + _raw(other))

    __radd__ = __add__

    def __sub__(self, other):
        return Tensor(self.data - _raw(other))

    def __rsub__(self, other):
        return Tensor(_raw(other) - self.data)

    def __mul__(self, other):
        return Tensor(self.data * _raw(other))

    __rmul__ = __mul__

    def __truediv__(self, other):
        return Tensor(self.data / _raw(other))

    def __neg__(self):
        return Tensor(-self.data)

    def __pow__(self, exponent):
        return Tensor(self.data ** _raw(exponent))

    def __matmul__(self, other):
        return Tensor(self.data @ _raw(other))

    def __eq__(self, other):  # elementwise, like torch
        return Tensor(self.data == _raw(other))

    def __ne__(self, other):
        return Tensor(self.data != _raw(other))

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"tensor({np.array2string(self.data, precision=4, threshold=20)})"

    def to(self, *args, **kwargs) -> Tensor:
        for arg in (*args, kwargs.get("dtype")):
            if isinstance(arg, dtype):
                return Tensor(self.data.astype(arg.numpy))
        return self

    def float(self) -> Tensor:
        return Tensor(self.data.astype(np.float32))

    def long(self) -> Tensor:
        return Tensor(self.data.astype(np.int64))

    def clone(self) -> Tensor:
        return Tensor(self.data.copy())

    def contiguous(self) -> Tensor:
        return self

    def numpy(self) -> np.ndarray:
        return self.data

    def tolist(self):
        return self.data.tolist()

    def item(self):
        return self.data.item()

    def view(self, *shape) -> Tensor:
        return Tensor(self.data.reshape(*shape))

    reshape = view

    def unsqueeze(self, dim: int) -> Tensor:
        return Tensor(np.expand_dims(self.data, dim))

    def squeeze(self, dim: int | None = None) -> Tensor:
        return Tensor(self.data.squeeze() if dim is None else self.data.squeeze(dim))

    def pow(self, exponent) -> Tensor:
        return self**exponent

    def mean(self, dim=None, keepdim: builtins.bool = False) -> Tensor:
        return Tensor(self.data.mean(axis=dim, keepdims=keepdim))

    def sum(self, dim=None, keepdim: builtins.bool = False) -> Tensor:
        return Tensor(self.data.sum(axis=dim, keepdims=keepdim))

    def argmax(self, dim: int = -1) -> Tensor:
        return Tensor(self.data.argmax(axis=dim))

    def topk(self, k: int, dim: int = -1):
        index = np.argsort(-self.data, axis=dim, kind="stable").take(np.arange(k), axis=dim)
        return Tensor(np.take_along_axis(self.data, index, axis=dim)), Tensor(index)

    def chunk(self, chunks: int, dim: int = 0):
        return [Tensor(part) for part in np.array_split(self.data, chunks, axis=dim)]

    def split(self, sizes, dim: int = 0):
        bounds = np.cumsum(sizes)[:-1]
        return [Tensor(part) for part in np.split(self.data, bounds, axis=dim)]

    def copy_(self, other) -> Tensor:
        self.data[...] = _raw(other)
        return self

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        index = [slice(None)] * self.data.ndim
        index[dim] = slice(start, start + length)
        return Tensor(self.data[tuple(index)])


def _raw(value):
    if isinstance(value, Tensor):
        return value.data
    if isinstance(value, tuple):
        return tuple(_raw(v) for v in value)
    return value


def tensor(data, dtype: dtype | None = None, device=None) -> Tensor:
    array = np.asarray(_raw(data))
    return Tensor(array.astype(dtype.numpy) if dtype is not None else array)


as_tensor = tensor


def from_numpy(array: np.ndarray) -> Tensor:
    return Tensor(array)


def _shape(shape) -> tuple:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)


def zeros(*shape, dtype: dtype = float32, device=None) -> Tensor:
    return Tensor(np.zeros(_shape(shape), dtype=dtype.numpy))


def ones(*shape, dtype: dtype = float32, device=None) -> Tensor:
    return Tensor(np.ones(_shape(shape), dtype=dtype.numpy))


def empty(*shape, dtype: dtype = float32, device=None) -> Tensor:
    cuda._allocate(int(np.prod(_shape(shape))) * dtype.numpy.itemsize)
    return Tensor(np.zeros(_shape(shape), dtype=dtype.numpy))


def arange(n: int, dtype: dtype = int64, device=None) -> Tensor:
    return Tensor(np.arange(n, dtype=dtype.numpy))


def cat(tensors, dim: int = 0) -> Tensor:
    return Tensor(np.concatenate([_raw(t) for t in tensors], axis=dim))


def stack(tensors, dim: int = 0) -> Tensor:
    return Tensor(np.stack([_raw(t) for t in tensors], axis=dim))


def argmax(x: Tensor, dim: int = -1) -> Tensor:
    return x.argmax(dim)


def topk(x: Tensor, k: int, dim: int = -1):
    return x.topk(k, dim)


def rsqrt(x: Tensor) -> Tensor:
    return Tensor(1.0 / np.sqrt(x.data))


@contextlib.contextmanager
def no_grad():
    yield


inference_mode = no_grad


class OutOfMemoryError(RuntimeError):
    pass


class AcceleratorError(RuntimeError):
    pass


OutOfMemoryError.__module__ = "torch"
AcceleratorError.__module__ = "torch"


class _Cuda:
    """The simulated GPUs: ORCH_REHEARSAL_GPUS devices of 80 GB."""

    total_bytes = 85_031_714_816  # 79.19 GiB, an 80 GB H100 as torch reports it

    def __init__(self):
        self._fail_next_allocation = False

    def device_count(self) -> int:
        return int(os.environ.get("ORCH_REHEARSAL_GPUS", "8"))

    def is_available(self) -> builtins.bool:
        return self.device_count() > 0

    def set_device(self, index: int) -> None:
        if not 0 <= index < self.device_count():
            raise AcceleratorError(
                "CUDA error: invalid device ordinal\n"
                "CUDA kernel errors might be asynchronously reported at any other API call, "
                "so the stacktrace below might be incorrect.\n"
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
            )

    def synchronize(self) -> None:
        pass

    def fail_next_allocation(self) -> None:
        self._fail_next_allocation = True

    def _allocate(self, nbytes: int) -> None:
        if self._fail_next_allocation:
            self._fail_next_allocation = False
            raise OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 616.00 MiB. GPU 0 has a total capacity of 79.19 GiB "
                "of which 410.19 MiB is free. Including non-PyTorch memory, this process has 78.78 GiB memory "
                "in use. Of the allocated memory 76.52 GiB is allocated by PyTorch, and 1.21 GiB is reserved "
                "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
                "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
            )


cuda = _Cuda()


class _Distributed:
    class DistBackendError(RuntimeError):
        pass

    DistBackendError.__module__ = "torch.distributed"
    DistBackendError.__qualname__ = "DistBackendError"


distributed = _Distributed()


# --- torch.nn -------------------------------------------------------------------------------

_init_rng = np.random.default_rng(0)


class Parameter(Tensor):
    def __init__(self, data, requires_grad: builtins.bool = False):
        super().__init__(data)


class Module:
    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_parameters(self, prefix: str = ""):
        for name, value in list(vars(self).items()):
            if isinstance(value, Parameter):
                yield prefix + name, value
            elif isinstance(value, Module):
                yield from value.named_parameters(f"{prefix}{name}.")

    def parameters(self):
        return (param for _, param in self.named_parameters())

    def eval(self) -> Module:
        return self


class ModuleList(Module):
    def __init__(self, modules=()):
        self._modules = list(modules)

    def __iter__(self):
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __getitem__(self, index):
        return self._modules[index]

    def named_parameters(self, prefix: str = ""):
        for index, module in enumerate(self._modules):
            yield from module.named_parameters(f"{prefix}{index}.")


class Linear(Module):
    def __init__(self, in_features: int, out_features: int, bias: builtins.bool = True):
        self.in_features = in_features
        self.out_features = out_features
        bound = 1.0 / np.sqrt(in_features)
        self.weight = Parameter(_init_rng.uniform(-bound, bound, (out_features, in_features)).astype(np.float32))
        self.bias = Parameter(np.zeros(out_features, dtype=np.float32)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        out = x.data @ self.weight.data.T
        return Tensor(out if self.bias is None else out + self.bias.data)


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int):
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.weight = Parameter(_init_rng.standard_normal((num_embeddings, embedding_dim)).astype(np.float32))

    def forward(self, input_ids: Tensor) -> Tensor:
        ids = np.asarray(_raw(input_ids))
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_embeddings):
            # what an out-of-range index does to the CUDA embedding kernel
            raise AcceleratorError(
                "CUDA error: device-side assert triggered\n"
                "CUDA kernel errors might be asynchronously reported at any other API call, "
                "so the stacktrace below might be incorrect.\n"
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
            )
        return Tensor(self.weight.data[ids])


class _Functional:
    @staticmethod
    def silu(x: Tensor) -> Tensor:
        return Tensor(x.data * 0.5 * (1.0 + np.tanh(0.5 * x.data)))  # x * sigmoid(x), overflow-free


class _NN:
    Module = Module
    ModuleList = ModuleList
    Linear = Linear
    Embedding = Embedding
    Parameter = Parameter
    functional = _Functional()


nn = _NN()
