"""OpenAI-compatible backend: the scale-out path.

Many harness workers share one inference service (a `vllm serve` cluster behind a load balancer,
TGI, a llama.cpp server): each `complete` is one ``POST {base_url}/chat/completions``, and the
caller's concurrent calls are the server's batch. No model is loaded here; the server decides
dtype, batching and caching. At most `concurrency` x endpoints requests are in flight per event
loop; the others wait for a slot before their deadline starts.

With `openai.tokenizer` set, prompts are encoded here and sent as token ids to `{base_url}/completions`
(`openai_prompt`), and the token budget is the local backends' (what the prompt leaves of `context_length`).

Semantics match the local backends: the API takes at most 4 `stop` entries, so the first 4 are
sent and the reply is also cut client-side at every stop string; token counts come from `usage`;
`finish_reason` maps to "stop" / "length" ("tool_calls" is "stop").

Native tool protocol (`GenParams.tools`): in chat mode the tools go out as the API's `tools` and the
server's parsed `tool_calls` come back on `Completion.tool_calls` (a reply of calls only has empty
text); with `openai.tokenizer` the template renders them here and the calls stay in the text.

Replies are streamed (SSE, `stream: true` with usage in the last chunk) unless the entry says
`stream: false`; a server that ignores the flag and answers with JSON is read as such. Streamed,
`timeout_s` bounds the silence between chunks, not the whole generation. Without streaming a long
reply from a loaded CPU server (768 tokens at ~1 token/s per request with 40 in flight) outlasted
the timeout, was sent again from scratch, and after `max_retries` stopped the run.

Retries: 429, 5xx, timeouts, connection errors, a stream cut short and an error chunk inside a stream
are retried up to `max_retries` times with exponential backoff and jitter
(``AGENT_HARNESS_OPENAI_BACKOFF_S`` is the base delay, default 1 s), honouring a `Retry-After` header.
A prompt the server finds longer than its context (HTTP 400 saying so, vLLM's or OpenAI's wording) is
that episode's end, as on the local backends: an empty reply with finish_reason "length", which the
agent records as exit "context". Other 4xx fail at once with the server's message. When retries run
out, BackendUnavailable names the URL and the last status: a dead server stops the run.

A server's reply is hostile input (`openai_reply`): one request has `deadline_s` in all (retries,
backoff and a streamed reply included; `asyncio.timeout_at` around it, so keep-alive comments, an
endless stream of tokens or a server that trickles a byte before each read timeout end there), its
reply at most a number of bytes and characters derived from `max_tokens`, JSON nested at most
`MAX_DEPTH` deep, the completion's shape checked, and `usage` counts kept only when they are ints in
range (else None: unknown). A reply that fails any of these is not retried: its Completion carries
`error` (one line), the runner ends that episode with exit "error", and the run goes on.

Several endpoints (`base_url` a list): each attempt goes to the live endpoint with the fewest
requests in flight (`endpoint_pool`); a failing one is taken out with backoff and probed again,
and the request moves on to another, so a dead node costs its in-flight requests one retry each.
A request gets `(max_retries + 1) x endpoints` attempts in all. The trace header lists the
endpoints (`details.endpoints`) and each reply names the one that answered (`Completion.endpoint`).
The HTTP client is httpx (`openai_http` says why not the `openai` SDK).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .. import secrets
from ..errors import BackendError, BackendUnavailable, ConfigError, MissingExtraError
from ..settings import get_settings
from ..types import BackendInfo, Completion, Conversation, FinishReason, GenParams, RequestMeta
from . import scoring
from .endpoint_pool import Endpoint, EndpointPool, Outcome
from .local import context_full, first_line, new_token_budget
from .openai_http import LoopClients, StreamCut, read_head, read_reply, retry_after
from .openai_prompt import Prompt, PromptEncoder
from .openai_reply import (
    ERROR_BODY_BYTES,
    BadReply,
    MidStreamError,
    Reply,
    ReplyCaps,
    error_message,
    one_line,
    usage_counts,
)
from .stops import cut_at_stop, stop_strings

if TYPE_CHECKING:
    import httpx

    from ..registry import ModelSpec, OpenAIEndpoint

log = logging.getLogger(__name__)

MAX_API_STOPS = 4
DEFAULT_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
RETRY_STATUSES = frozenset({408, 429}) | frozenset(range(500, 600))
# vLLM: "This model's maximum context length is 4096 tokens. However, your prompt contains at least 4097
# input tokens ..." (or "Input length (N) exceeds model's maximum context length"); OpenAI's code.
CONTEXT_ERROR = re.compile(r"maximum context length|context_length_exceeded", re.I)
PROMPT_TOKENS = re.compile(r"(\d+) input tokens|Input length \((\d+)\)")


class ContextTooLong(BackendUnavailable):
    """The server refused a prompt longer than its context; `prompt_tokens` when it said how long."""

    def __init__(self, message: str, prompt_tokens: int | None) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens


def _backoff_base() -> float:
    backoff = get_settings().openai_backoff_s
    return DEFAULT_BACKOFF_S if backoff is None else backoff


@dataclass
class _Tries:
    """One request's attempts so far, for the message that ends it."""

    deadline: float  # the event loop's clock
    made: int = 0
    last: str = ""  # why the last finished attempt failed
    url: str = ""


class OpenAIBackend:
    """Chat completions (or completions of token ids) against an OpenAI-compatible server."""

    def __init__(self, spec: ModelSpec) -> None:
        try:
            import httpx
        except ImportError:
            raise MissingExtraError("the openai backend needs httpx: pip install httpx") from None
        if spec.openai is None:
            raise ConfigError(f"model '{spec.name}': backend 'openai' needs an 'openai' block")
        self.spec = spec
        self.endpoint: OpenAIEndpoint = spec.openai
        self.prompts = PromptEncoder(spec, self.endpoint.tokenizer)
        endpoints = []
        for base_url, key_env in zip(self.endpoint.urls(), self.endpoint.key_envs(), strict=True):
            headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
            if key_env:
                key = os.environ.get(key_env)
                if not key:
                    raise BackendUnavailable(f"model '{spec.name}': the API key variable {key_env} is not set")
                secrets.register(key)  # never printed or stored, whatever the server quotes back
                headers["Authorization"] = f"Bearer {key}"
            endpoints.append(Endpoint(base_url, base_url.rstrip("/") + self.prompts.path, headers))
        self.url = endpoints[0].url
        self.backoff_s = _backoff_base()
        self.pool = EndpointPool(endpoints, self.backoff_s, MAX_BACKOFF_S, max_fails=self.endpoint.max_retries)
        self._rng = random.Random()
        self._rng_lock = threading.Lock()  # event loops in several threads may share this backend
        self.clients = LoopClients(self.endpoint.timeout_s, len(endpoints) * self.endpoint.concurrency, spec.name)
        self.info = BackendInfo(
            requested="openai", used="openai", device="remote",
            details={"base_url": self.endpoint.base_url, "endpoints": [e.base_url for e in endpoints],
                     "model": self.endpoint.model, "concurrency": self.endpoint.concurrency,
                     "max_retries": self.endpoint.max_retries, "timeout_s": self.endpoint.timeout_s,
                     "deadline_s": self.endpoint.deadline_s, "reply_caps": ReplyCaps.describe(),
                     "httpx": httpx.__version__, **self.prompts.details()},
        )

    async def complete(self, conversation: Conversation, params: GenParams,
                       meta: RequestMeta | None = None) -> Completion:
        """The reply to one conversation (a trailing assistant message is continued); `params.seed` is
        sent as the API's `seed`. A bad reply is a Completion with `error` set (its episode ends there);
        BackendUnavailable when retries are spent or the server refused the request (4xx)."""
        if params.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {params.max_tokens}")
        if params.prompt_logprobs and self.prompts.tokenizer is None:
            raise ConfigError(f"model '{self.spec.name}': scoring a reply (--agent branch) needs prompt token ids: "
                              "set openai.tokenizer (a vllm serve's completions API; chat APIs have no "
                              "prompt log-probabilities)")
        lc = self.clients.get()
        async with lc.slots:
            if params.prompt_logprobs:
                return await self._score(lc.client, list(conversation), params)
            return await self._one(lc.client, list(conversation), params, stop_strings(params))

    def stats(self) -> dict[str, float]:
        """Attempts by outcome over all endpoints (ok, soft: retryable, hard: connection lost) and
        take-outs, for the run log."""
        return {f"attempts_{k}" if k != "taken_out" else k: float(v) for k, v in self.pool.totals().items()}

    def close(self) -> None:
        self.clients.close()

    # -- one request -----------------------------------------------------------------------------
    def _payload(self, prompt: Prompt, params: GenParams, stops: tuple[str, ...]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.endpoint.model, **prompt.fields, "max_tokens": params.max_tokens,
            "temperature": params.temperature, "top_p": params.top_p,
        }
        if stops:
            body["stop"] = list(stops[:MAX_API_STOPS])
        if params.seed is not None:
            body["seed"] = params.seed
        if self.endpoint.stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        return body

    async def _one(self, client: httpx.AsyncClient, conv: Conversation, params: GenParams,
                   stops: tuple[str, ...]) -> Completion:
        t0 = time.perf_counter()
        try:  # a few ms of tokenizer work on the loop (token-id mode); a thread hop would cost as much
            req = self.prompts.prompt(conv, params.chat_template, params.tools)
        except Exception as e:  # the template refused this conversation, or cannot keep its text as text
            msg = str(e) if isinstance(e, BackendError) else f"cannot encode the prompt: {one_line(first_line(e))}"
            log.warning("%s", msg)
            return Completion("", None, None, "error", time.perf_counter() - t0, cached_tokens=None, error=msg)
        if req.n_ids is not None:  # as on the local backends: the prompt and the reply share the context
            max_new = new_token_budget(req.n_ids, params.max_tokens, self.spec.context_length)
            if not max_new:
                return context_full(req.n_ids)
            params = replace(params, max_tokens=max_new)
        caps, bound = ReplyCaps.for_tokens(params.max_tokens), req.bound
        tries = _Tries(asyncio.get_running_loop().time() + self.endpoint.deadline_s, url=self.url)
        try:
            async with asyncio.timeout_at(tries.deadline):
                reply, ep = await self._post(client, self._payload(req, params, stops), caps, tries)
        except TimeoutError:
            return self._failed(BadReply(self._late(tries)), t0)
        except ContextTooLong as e:  # this conversation is over, not the run
            log.warning("%s", e)
            said = e.prompt_tokens if e.prompt_tokens is not None and e.prompt_tokens <= bound else None
            return Completion("", said, 0, "length", time.perf_counter() - t0)
        except BadReply as e:
            return self._failed(e, t0)
        text = reply.text  # empty with tool calls (native protocol): a reply like any other
        finish: FinishReason = "length" if reply.finish_reason == "length" else "stop"  # "tool_calls": stop
        cut = cut_at_stop(text, stops)
        if cut is not None:
            text, finish = cut, "stop"
        prompt, completion, cached = usage_counts(reply.usage, params.max_tokens, bound)
        return Completion(text=text, prompt_tokens=prompt, completion_tokens=completion, finish_reason=finish,
                          latency_s=time.perf_counter() - t0, cached_tokens=cached, endpoint=ep.base_url,
                          tool_calls=reply.tool_calls)

    async def _score(self, client: httpx.AsyncClient, conv: Conversation, params: GenParams) -> Completion:
        """A scoring request: the prompt's ids with vLLM's `prompt_logprobs`, one token generated and dropped."""
        t0 = time.perf_counter()
        scoring.check(conv, params)
        try:
            ids, first = scoring.message_start(
                lambda c: list(self.prompts.prompt(c, params.chat_template, params.tools).fields["prompt"]), conv)
        except Exception as e:
            return self._failed(BadReply(f"cannot encode the prompt: {one_line(first_line(e))}"), t0)
        if len(ids) >= self.spec.context_length:
            return context_full(len(ids))
        body = {"model": self.endpoint.model, "prompt": ids, "max_tokens": 1, "temperature": 0.0,
                "prompt_logprobs": params.prompt_logprobs}
        caps = ReplyCaps.for_tokens(len(ids) * (params.prompt_logprobs + 1))
        tries = _Tries(asyncio.get_running_loop().time() + self.endpoint.deadline_s, url=self.url)
        try:
            async with asyncio.timeout_at(tries.deadline):
                reply, ep = await self._post(client, body, caps, tries)
            if reply.prompt_logprobs is None:
                raise BadReply(f"{ep.url}: the reply has no prompt_logprobs (not a vllm serve?)")
            if len(reply.prompt_logprobs) != len(ids):
                raise BadReply(f"{ep.url}: prompt_logprobs for {len(reply.prompt_logprobs)} tokens, "
                               f"the prompt has {len(ids)}")
            scores = scoring.token_scores(scoring.decoder(self.prompts.tokenizer), ids, first, conv[-1]["content"],
                                          reply.prompt_logprobs, params.prompt_logprobs)
        except TimeoutError:
            return self._failed(BadReply(self._late(tries)), t0)
        except ContextTooLong as e:
            log.warning("%s", e)
            return Completion("", len(ids), 0, "length", time.perf_counter() - t0)
        except BackendError as e:  # BadReply included
            return self._failed(BadReply(str(e)), t0)
        prompt, _, cached = usage_counts(reply.usage, 1, len(ids))
        return Completion("", prompt, 0, "stop", time.perf_counter() - t0, cached_tokens=cached,
                          endpoint=ep.base_url, scores=scores)

    @staticmethod
    def _failed(e: BadReply, t0: float) -> Completion:
        log.warning("%s", e)
        return Completion("", None, None, "error", time.perf_counter() - t0, cached_tokens=None, error=str(e))

    def _late(self, tries: _Tries) -> str:
        why = f"; last failure: {tries.last}" if tries.last else ""
        return (f"{tries.url}: no reply before the request's deadline ({self.endpoint.deadline_s:g} s) "
                f"in {tries.made} attempt(s){why}")

    def _delay(self, attempt: int, retry_after_s: float | None) -> float:
        with self._rng_lock:
            jitter = self._rng.uniform(0.5, 1.5)
        delay = min(MAX_BACKOFF_S, self.backoff_s * 2**attempt) * jitter
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, MAX_BACKOFF_S * 5))
        return delay

    async def _post(self, client: httpx.AsyncClient, body: dict[str, Any], caps: ReplyCaps,
                    tries: _Tries) -> tuple[Reply, Endpoint]:
        """POST with retries and failover (the caller bounds it by `tries.deadline`); (the validated reply,
        the endpoint that gave it), or BadReply (a bad reply, or a backoff past the deadline),
        BackendUnavailable (retries spent, or a 4xx)."""
        import httpx

        loop = asyncio.get_running_loop()
        attempts = (self.endpoint.max_retries + 1) * len(self.pool)
        prev: Endpoint | None = None
        streak = 0  # attempts in a row on the same endpoint (its retry backoff)
        wait_for: float | None = None  # the last reply's Retry-After
        for attempt in range(attempts):
            ep, wait = self.pool.acquire()
            streak = streak + 1 if ep is prev else 0
            if streak:
                wait = max(wait, self._delay(streak - 1, wait_for))
            if loop.time() + wait >= tries.deadline:
                self.pool.cancel(ep)
                raise BadReply(self._late(tries))
            outcome: Outcome | None = "hard"
            try:
                if attempt:
                    log.warning("%s: %s; retry %d/%d on %s in %.2f s", tries.url, tries.last, attempt,
                                attempts - 1, ep.base_url, wait)
                if wait > 0:
                    await asyncio.sleep(wait)
                prev, tries.url, tries.made, wait_for = ep, ep.url, attempt + 1, None
                try:
                    async with client.stream("POST", ep.url, json=body, headers=ep.headers) as resp:
                        status, error_body = resp.status_code, b""
                        if status == 200:
                            reply = await read_reply(resp, caps)
                        else:
                            error_body = await read_head(resp, ERROR_BODY_BYTES)
                            wait_for = retry_after(resp)
                except httpx.TimeoutException as e:
                    outcome, tries.last = "soft", f"timeout after {self.endpoint.timeout_s:g} s ({type(e).__name__})"
                    continue
                except httpx.TransportError as e:
                    tries.last = f"connection error ({type(e).__name__}: {one_line(str(e), 200)})"
                    continue
                except (StreamCut, MidStreamError) as e:
                    outcome, tries.last = "soft", str(e)
                    continue
                except BadReply as e:
                    outcome = "soft"
                    raise BadReply(f"{ep.url}: {e}") from None
                if status == 200:
                    outcome = "ok"
                    return reply, ep
                self._refused(ep, status, error_body)  # raises unless the status is retried
                outcome, tries.last = "soft", f"HTTP {status}: {error_message(error_body)}"
            except asyncio.CancelledError:  # the deadline (a slow reply counts against its server) or the caller
                outcome = "soft" if loop.time() >= tries.deadline else None
                raise
            except BackendUnavailable:
                outcome = "ok"  # the server is alive and answered: the request is at fault
                raise
            finally:
                if outcome is None:
                    self.pool.cancel(ep)
                else:
                    self.pool.release(ep, outcome, wait_for)
        where = f" on {len(self.pool)} endpoints" if len(self.pool) > 1 else ""
        raise BackendUnavailable(f"{tries.url}: gave up after {attempts} attempt(s){where}; last: {tries.last}")

    @staticmethod
    def _refused(ep: Endpoint, status: int, error_body: bytes) -> None:
        """Raise for a status that is not retried: ContextTooLong for a prompt over the server's context,
        else BackendUnavailable with the server's message."""
        if status in RETRY_STATUSES:
            return
        msg = error_message(error_body)
        if status == 400 and CONTEXT_ERROR.search(error_body[:2000].decode("utf-8", "replace")):
            m = PROMPT_TOKENS.search(msg)
            said = next(filter(None, m.groups())) if m else ""
            raise ContextTooLong(f"{ep.url}: HTTP 400: {msg}", int(said) if len(said) < 12 else None)
        raise BackendUnavailable(f"{ep.url}: HTTP {status}: {msg}")
