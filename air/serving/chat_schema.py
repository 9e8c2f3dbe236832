"""The request bodies the server accepts on ``/v1/chat/completions``: OpenAI's chat shape,
keeping only what a scripted policy reads (unknown fields are ignored, as sampling knobs are)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")  # image/audio parts carry more keys; only text matters here

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")  # name, tool_calls, ... are legal and irrelevant

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    def as_dict(self) -> dict[str, Any]:
        if isinstance(self.content, list):
            text = "".join(part.text or "" for part in self.content)
        else:
            text = self.content or ""
        return {"role": self.role, "content": text}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class ChatRequest(BaseModel):
    # extra="ignore": clients send sampling knobs a scripted policy has no use for.
    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=16)
