"""Lists of dataclass records that convert to a pandas DataFrame when pandas is installed."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

R = TypeVar("R")


class RecordList(list[R]):
    """A list of dataclass records with :meth:`to_dicts` and :meth:`to_pandas`."""

    def to_dicts(self) -> list[dict[str, Any]]:
        """One plain dictionary per record."""
        return [dataclasses.asdict(record) for record in self]  # type: ignore[call-overload]

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame`` with one row per record (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - pandas is a test dependency
            raise ImportError(
                "to_pandas: expected pandas to be installed (pip install pandas), got ImportError"
            ) from exc
        return pd.DataFrame(self.to_dicts())
