"""Sample statistics: the protocol's own (`workers.protocol.stats`), which the server's
half of the result gate recomputes from posted samples, under the name the sampling
loops import."""

from workers.protocol.stats import WIDE_SPREAD, quartiles, relative_iqr, summarize

__all__ = ["WIDE_SPREAD", "quartiles", "relative_iqr", "summarize"]
