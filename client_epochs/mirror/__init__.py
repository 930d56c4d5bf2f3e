"""The replicator: a MirrorMaker-style copier of topics between clusters that never rewinds (KIP-232).

`replicator` runs the copy (one source, one target, an epoch-aware consumer and an idempotent
producer); `progress` keeps the sans-IO bookkeeping of provenance, acknowledgements and resumes;
`topics` does the one-shot admin steps on both sides; `cli` is the `client-epochs-mirror` command;
`offsets` (sans IO) and `checkpoints` translate consumer group offsets as MM2 does (offset syncs,
checkpoints, group offset sync, `translate_offsets`).

The names below load `replicator` (and so confluent-kafka, an optional dependency) on first use, so
that `python -m client_epochs.mirror.cli --help` and the sans-IO modules work without it.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"DEFAULT_GROUP": "replicator", "RESERVED": "replicator", "MirrorOptions": "replicator",
         "Replicator": "replicator", "ReplicatorError": "topics", "translate_offsets": "checkpoints",
         "OffsetTranslationOptions": "offsets"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
