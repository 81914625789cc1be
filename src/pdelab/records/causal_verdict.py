"""The causality probe's verdict on a model, as written into result.parquet. Torch-free, so the
report reads verdicts without importing torch (pdelab.training.causality measures them)."""

from __future__ import annotations

import math
from enum import StrEnum


class Causality(StrEnum):
    """Does an output see a later token? The values are the words result.parquet stores."""

    CAUSAL = "causal"
    LEAKS = "leaks future tokens"

    @property
    def leaks(self) -> bool:
        return self is Causality.LEAKS

    @classmethod
    def parse(cls, text: object) -> Causality | None:
        """A summary cell's verdict: None where the run was not probed (empty or missing)."""
        if text is None or (isinstance(text, float) and math.isnan(text)) or text == "":
            return None
        return cls(str(text))
