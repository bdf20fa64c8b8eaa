"""numpy arrays as widget traits, sent as binary buffers.

An array crosses the wire as ``{"view": <buffer>, "dtype": "float32", "shape":
[2, 3]}``: ipywidgets lifts the ``memoryview`` out of the JSON state and sends
it as a binary frame, so weights never become JSON lists of floats. The bytes
are C-ordered and little-endian; ``js/src/lib/arrays.ts`` decodes them into
typed arrays (float16 is widened to ``Float32Array`` there).
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np
import torch
import traitlets
from numpy.typing import NDArray

from circuitwidgets.errors import ArgumentTypeError
from circuitwidgets.widgets.core.spec import trait_error

__all__ = [
    "WIRE_DTYPES",
    "ArrayJSON",
    "NDArrayTrait",
    "array_from_json",
    "array_serialization",
    "array_to_json",
    "data_serialization",
    "quantise_unit",
    "user_array",
]

#: dtypes the front end can decode (numpy names, as sent in ``"dtype"``).
WIRE_DTYPES: frozenset[str] = frozenset(
    {"bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "float16", "float32", "float64"}
)


class ArrayJSON(TypedDict):
    """Wire form of an array."""

    view: memoryview | bytes
    dtype: str
    shape: list[int]


def array_to_json(value: NDArray[Any] | None, widget: object = None) -> ArrayJSON | None:
    """Serialise an array for the front end (no copy when it is already C-ordered little-endian).

    Parameters
    ----------
    value
        Array of a dtype in :data:`WIRE_DTYPES`, or ``None``.
    widget
        The widget being serialised (unused; ipywidgets' ``to_json`` signature).

    Raises
    ------
    TypeError
        If the dtype cannot be decoded by the front end.
    """
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.dtype.name not in WIRE_DTYPES:
        raise TypeError(
            f"cannot send an array of dtype {arr.dtype.name} to the view; expected one of {sorted(WIRE_DTYPES)}"
        )
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    view = arr.data.cast("B") if arr.size else memoryview(b"")
    return {"view": view, "dtype": arr.dtype.name, "shape": [int(d) for d in arr.shape]}


def array_from_json(value: ArrayJSON | dict[str, Any] | None, widget: object = None) -> NDArray[Any] | None:
    """Rebuild an array from its wire form (a fresh, writable copy).

    Raises
    ------
    TypeError
        If ``value`` is not a ``{"view", "dtype", "shape"}`` mapping.
    ValueError
        If the byte length does not match dtype and shape.
    """
    if value is None:
        return None
    try:
        raw, dtype_name, shape = value["view"], value["dtype"], value["shape"]
    except (KeyError, TypeError) as exc:
        raise TypeError(f"expected an array as {{'view', 'dtype', 'shape'}}, got {value!r:.200}") from exc
    if dtype_name not in WIRE_DTYPES:
        raise TypeError(f"unsupported array dtype {dtype_name!r}; expected one of {sorted(WIRE_DTYPES)}")
    dtype = np.dtype(dtype_name).newbyteorder("<")  # wire bytes are little-endian
    shape_t = tuple(int(d) for d in shape)
    buf = memoryview(raw).cast("B") if not isinstance(raw, bytes) else raw
    count = int(np.prod(shape_t, dtype=np.int64))
    if len(buf) != count * dtype.itemsize:
        raise ValueError(
            f"array of shape {shape_t} and dtype {dtype_name} needs {count * dtype.itemsize} bytes, got {len(buf)}"
        )
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape_t).astype(np.dtype(dtype_name), copy=True)


#: ``.tag(sync=True, **array_serialization)`` for a trait holding an array.
array_serialization: dict[str, Any] = {"to_json": array_to_json, "from_json": array_from_json}


def _data_to_json(value: dict[str, Any] | None, widget: object = None) -> dict[str, Any] | None:
    """Serialise a dictionary of view data: numpy arrays become binary buffers."""
    if value is None:
        return None
    return {key: (array_to_json(v) if isinstance(v, np.ndarray) else v) for key, v in value.items()}


def _kernel_only(value: Any, widget: object = None) -> Any:
    raise TypeError("view data is sent by the kernel only; the view cannot change it")


#: ``.tag(sync=True, **data_serialization)`` for a dictionary of view data (the explorer's ``<view>_data``).
data_serialization: dict[str, Any] = {"to_json": _data_to_json, "from_json": _kernel_only}


def user_array(name: str, values: Any, dtype: str, expected: str) -> NDArray[Any]:
    """An array a user passed (numpy, torch on any device, nested lists) as numpy ``dtype``.

    Raises
    ------
    ArgumentTypeError
        Naming ``name``, what was ``expected`` and what was received, when it is
        not an array of numbers (complex only where ``dtype`` is complex).
    """
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"{name}: expected {expected}, got {type(values).__name__} ({exc})") from None
    kinds = "fiuc" if np.dtype(dtype).kind == "c" else "fiu"
    if arr.dtype.kind not in kinds:
        raise ArgumentTypeError(f"{name}: expected {expected} (numbers), got an array of dtype {arr.dtype}")
    return arr.astype(dtype)


def quantise_unit(values: NDArray[np.floating[Any]]) -> NDArray[np.uint8]:
    """Quantise values in [0, 1] to uint8 as ``round(255 * v)`` (values clipped first).

    The error of ``q / 255`` is at most ``0.5 / 255`` per value.
    """
    v = np.clip(np.asarray(values, dtype=np.float32), 0.0, 1.0)
    q: NDArray[np.uint8] = np.rint(v * 255.0).astype(np.uint8)
    return q


class NDArrayTrait(traitlets.TraitType[NDArray[Any], NDArray[Any]]):
    """A numpy array trait, checked for dtype and number of dimensions, sent as binary.

    Parameters
    ----------
    dtype
        Required dtype (values are cast to it when safe), or ``None`` for any wire dtype.
    ndim
        Required number of dimensions, a tuple of allowed ones, or ``None``.
    dims
        Names of the dimensions (``("n_layers", "n_heads")``; an int is a fixed
        size, checked): sets ``ndim``, gives the widget its sizes
        (:class:`~circuitwidgets.widgets.core.spec.Size`) and the default, an empty
        array (named dimensions 0).
    allow_none
        Whether ``None`` is a valid value (the static type stays ``NDArray``;
        check for ``None`` yourself when you allow it).
    """

    info_text = "a numpy array"

    def __init__(
        self,
        *,
        dtype: str | np.dtype[Any] | None = None,
        ndim: int | tuple[int, ...] | None = None,
        dims: tuple[str | int, ...] | None = None,
        allow_none: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(default_value=None if dims is None else traitlets.Undefined, allow_none=allow_none, **kwargs)
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.dims = dims
        if dims is not None:
            ndim = len(dims)
        self.ndims: tuple[int, ...] | None = (ndim,) if isinstance(ndim, int) else ndim
        self.metadata.setdefault("to_json", array_to_json)
        self.metadata.setdefault("from_json", array_from_json)

    def make_dynamic_default(self) -> NDArray[Any] | None:
        """An empty array of the named dimensions (0 for each name), or ``None`` without ``dims``."""
        if self.dims is None:
            return None
        return np.zeros([d if isinstance(d, int) else 0 for d in self.dims], dtype=self.dtype or np.float32)

    def validate(self, obj: Any, value: Any) -> NDArray[Any]:
        if value is None:
            if self.allow_none:
                return None  # type: ignore[return-value]
            self.error(obj, value)
        if not isinstance(value, np.ndarray):
            raise trait_error(obj, self.name, "a numpy array", type(value).__name__)
        if self.dtype is not None and value.dtype != self.dtype:
            if not np.can_cast(value.dtype, self.dtype, casting="same_kind"):
                raise trait_error(obj, self.name, f"dtype {self.dtype}", str(value.dtype))
            value = value.astype(self.dtype)
        elif self.dtype is None and value.dtype.name not in WIRE_DTYPES:
            raise trait_error(obj, self.name, f"one of dtypes {sorted(WIRE_DTYPES)}", str(value.dtype))
        if self.ndims is not None and value.ndim not in self.ndims:
            raise trait_error(obj, self.name, f"an array with ndim in {self.ndims}", f"shape {value.shape}")
        if self.dims is not None and any(isinstance(d, int) and value.shape[i] != d for i, d in enumerate(self.dims)):
            named = ", ".join(str(d) for d in self.dims)
            raise trait_error(obj, self.name, f"shape [{named}]", f"shape {list(value.shape)}")
        checked: NDArray[Any] = value
        return checked

    def set(self, obj: Any, value: Any) -> None:
        """Store ``value`` and notify when it is a different object; O(1), unlike traitlets' default.

        traitlets notifies unless ``bool(old == new)``: for numpy arrays that is an
        elementwise comparison, and against the default ``None`` an object-dtype
        loop (about a second per 25 MB of patterns). Here a different array
        object is a change.
        """
        new_value = self._validate(obj, value)
        assert self.name is not None
        old_value = obj._trait_values.get(self.name, self.default_value)
        obj._trait_values[self.name] = new_value
        if new_value is not old_value:
            obj._notify_trait(self.name, old_value, new_value)
