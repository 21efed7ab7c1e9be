"""What the panel's API answers when it cannot serve a request: an HTTP status, a stable reason, and a
message from the phrase tables, said in the server's language when the answer is written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flower_magic.core.errors import FlowerError
from flower_magic.core.words import say


@dataclass(frozen=True)
class Phrase:
    """A field that is itself a phrase (``kind_fifo``), said in the answer's language too."""

    key: str


class PanelError(FlowerError):
    """A request the panel cannot serve. ``status`` is the HTTP status, ``reason`` a stable word for
    programs, ``key`` and ``fields`` the phrase a person reads (``text(lang)``)."""

    def __init__(self, status: int, reason: str, key: str, **fields: Any) -> None:
        self.status = status
        self.reason = reason
        self.key = key
        self.fields = fields
        super().__init__(self.text("en"))

    def text(self, lang: str) -> str:
        said = {k: say(v.key, lang) if isinstance(v, Phrase) else v for k, v in self.fields.items()}
        return say(self.key, lang, **said)
