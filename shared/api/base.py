"""The base of every HTTP API model: field descriptions come from attribute docstrings, and
fields a newer server adds are kept (a client built on an older release still parses)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ApiModel(BaseModel):
    """A body the HTTP API answers with."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow")
