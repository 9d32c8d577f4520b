"""Cache policies for the compile stage, and the persistent cache's own event counts.

JAX keeps two kinds of compilation cache: in-memory caches of traces, lowerings and
executables, and an optional persistent cache on disk shared between processes. A
policy says what the compile stage may reuse, so its timing means what it says.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import jax.monitoring
from jax.experimental.compilation_cache import compilation_cache

from workers.compiler.jaxtyped import clear_caches, config_update
from workers.protocol import CacheEvents, CachePolicy

HIT_EVENT = "/jax/compilation_cache/cache_hits"
MISS_EVENT = "/jax/compilation_cache/cache_misses"
SAVED_EVENT = "/jax/compilation_cache/compile_time_saved_sec"


def default_cache_dir() -> Path:
    """Where the persistent cache lives when no setting names a directory."""
    return Path.home() / ".cache" / "boundary" / "jax"


@dataclass
class _Counters:
    """Running totals of persistent-cache events since the listeners were registered."""

    hits: int = 0
    misses: int = 0
    saved_s: float = 0.0
    saved_seen: bool = False


_counters = _Counters()
_lock = threading.Lock()
_registered: list[bool] = []  # non-empty once the listeners are in place


def _on_event(event: str, **_: str | int) -> None:
    if event == HIT_EVENT:
        with _lock:
            _counters.hits += 1
    elif event == MISS_EVENT:
        with _lock:
            _counters.misses += 1


def _on_duration(event: str, duration_secs: float, **_: str | int) -> None:
    if event == SAVED_EVENT:
        with _lock:
            _counters.saved_s += duration_secs
            _counters.saved_seen = True


def ensure_listeners() -> None:
    """Register the jax.monitoring listeners once per process (they cannot be unset)."""
    with _lock:
        if _registered:
            return
        _registered.append(True)
    jax.monitoring.register_event_listener(_on_event)
    jax.monitoring.register_event_duration_secs_listener(_on_duration)


def cache_counts() -> _Counters:
    """A copy of the running totals; subtract two copies to get one stage's events."""
    with _lock:
        return _Counters(_counters.hits, _counters.misses, _counters.saved_s, _counters.saved_seen)


def events_between(before: _Counters, after: _Counters) -> CacheEvents:
    """The persistent-cache events that happened between two `cache_counts()` copies."""
    saved = after.saved_s - before.saved_s if after.saved_seen else None
    if saved is not None and after.hits == before.hits:
        saved = None
    return CacheEvents(
        hits=after.hits - before.hits, misses=after.misses - before.misses, time_saved_s=saved
    )


def apply_cache_policy(policy: CachePolicy, cache_dir: Path) -> None:
    """Put JAX's compilation caches in the state `policy` asks for before compiling.

    `cold` clears the in-memory caches and turns the persistent cache off; `persistent`
    clears the in-memory caches and turns the persistent cache on at `cache_dir`, with
    its minimum compile time and entry size at 0 so that small programs are cached too;
    `warm` changes nothing. The persistent cache decides once whether it is in use, so
    every change is followed by a reset that makes it decide again.
    """
    ensure_listeners()
    if policy is CachePolicy.WARM:
        return
    if policy is CachePolicy.PERSISTENT:
        cache_dir.mkdir(parents=True, exist_ok=True)
        config_update("jax_compilation_cache_dir", str(cache_dir))
        config_update("jax_persistent_cache_min_compile_time_secs", 0)
        config_update("jax_persistent_cache_min_entry_size_bytes", 0)
        config_update("jax_enable_compilation_cache", True)
    else:
        config_update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    clear_caches()
