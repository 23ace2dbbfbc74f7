"""Request bodies of the OpenAI-compatible API and its error shape.

The pydantic models validate ``/v1/chat/completions`` and ``/v1/completions`` bodies
(unknown OpenAI fields are ignored; vLLM's ``top_k``, ``min_tokens``,
``stop_token_ids`` and ``ignore_eos`` are accepted as extensions). :class:`APIError`
is a refused request in OpenAI's shape,
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

MAX_TOP_LOGPROBS = 20
# the engine keeps seeds and top_k in int64 tensors and generators; larger integers
# would fail the whole decode batch, other clients' requests included
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# below the engine's vocabulary too (checked per model); tokenizers decode u32 ids
TokenId = Annotated[int, Field(ge=0, lt=2**32)]


class APIError(Exception):
    """A request the server refuses, reported in OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers  # e.g. Retry-After of a 429

    def response(self) -> JSONResponse:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return JSONResponse({"error": error}, status_code=self.status, headers=self.headers)


class _StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class _Sampling(BaseModel):
    """Fields shared by both endpoints; unknown OpenAI fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str
    n: int = Field(1, ge=1, le=128)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    stream: bool = False
    stream_options: _StreamOptions | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    # extensions (vLLM's names)
    top_k: int = Field(-1, ge=INT64_MIN, le=INT64_MAX)
    min_tokens: int = Field(0, ge=0)
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def rollout_args(self) -> dict[str, Any]:
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(self, name):
                raise APIError(400, f"{name} is not supported; leave it at 0", param=name)
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_tokens": self.max_tokens,
            "min_tokens": self.min_tokens,
            "stop": self.stop or None,
            "stop_token_ids": self.stop_token_ids or [],
            "ignore_eos": self.ignore_eos,
            "seed": self.seed,
        }


class _TextPart(BaseModel):
    type: Literal["text"]
    text: str


class _ImageURL(BaseModel):
    url: str = Field(min_length=1)
    detail: str | None = None  # accepted; the model's processor decides the resolution


class _ImagePart(BaseModel):
    type: Literal["image_url"]
    image_url: _ImageURL


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_TextPart | _ImagePart] | None = None

    def as_dict(self) -> dict[str, Any]:
        content: Any = self.content
        if isinstance(content, list) and any(isinstance(p, _ImagePart) for p in content):
            # images stay parts, for a vision-language model (see openai_images)
            content = [part.model_dump(exclude_none=True) for part in content]
        elif isinstance(content, list):
            content = "".join(part.text for part in content if isinstance(part, _TextPart))
        extra = {k: v for k, v in (self.model_extra or {}).items() if v not in (None, [], {})}
        return {"role": self.role, "content": content or "", **extra}


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class _Tool(BaseModel):
    type: Literal["function"]
    function: _Function


class _FunctionName(BaseModel):
    name: str


class _NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: _FunctionName


class ChatCompletionRequest(_Sampling):
    messages: list[_Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[_Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | _NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None  # accepted; every call in a reply is returned

    def tool_specs(self) -> list[dict[str, Any]]:
        """The tools to offer the model under ``tool_choice`` (see openai_tools)."""
        tools = [t.model_dump(exclude_none=True) for t in self.tools or []]
        choice = self.tool_choice
        if choice == "none":
            return []
        if isinstance(choice, _NamedToolChoice):
            named = [t for t in tools if t["function"]["name"] == choice.function.name]
            if not named:
                raise APIError(
                    400,
                    f"tool_choice names the function '{choice.function.name}', which is not "
                    f"in tools {[t['function']['name'] for t in tools]}",
                    param="tool_choice",
                )
            return named
        if choice == "required" and not tools:
            raise APIError(400, "tool_choice 'required' needs tools", param="tool_choice")
        return tools


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[TokenId] | list[list[TokenId]]
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
