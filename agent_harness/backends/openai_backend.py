"""OpenAI-compatible backend: the scale-out path.

Many harness workers share one inference service (a `vllm serve` cluster behind a load balancer,
TGI, a llama.cpp server): each worker sends its batch as `concurrency` parallel
``POST {base_url}/chat/completions`` requests and gets the results back in order. No model is
loaded here; the server decides dtype, batching and caching.

Semantics match the local backends: the API takes at most 4 `stop` entries, so the first 4 are
sent and the reply is also cut client-side at every stop string; token counts come from `usage`;
`finish_reason` maps to "stop" / "length".

Replies are streamed (SSE, `stream: true` with usage in the last chunk) unless the entry says
`stream: false`; a server that ignores the flag and answers with JSON is read as such. Streamed,
`timeout_s` bounds the silence between chunks, not the whole generation. Without streaming a long
reply from a loaded CPU server (768 tokens at ~1 token/s per request with 40 in flight) outlasted
the timeout, was sent again from scratch, and after `max_retries` stopped the run.

Retries: 429, 5xx, timeouts and connection errors are retried up to `max_retries` times with
exponential backoff and jitter (``AGENT_HARNESS_OPENAI_BACKOFF_S`` is the base delay, default 1 s),
honouring a `Retry-After` header. A prompt the server finds longer than its context (HTTP 400 saying
so, vLLM's or OpenAI's wording) is that episode's end, as on the local backends: an empty reply with
finish_reason "length", which the agent records as exit "context". Other 4xx fail at once with the
server's message. When retries run out, BackendUnavailable names the URL and the last status: a
dead server stops the run.

Streaming (`submit` / `poll`): the runner sends each episode's next prompt as soon as its tool has
run, each request on its own daemon thread, at most `concurrency` x endpoints in flight. A tick of
`generate` waits for its slowest reply, and the next prompts wait with it: on a CPU server the batch
then ran one straggler at a time.

Several endpoints (`base_url` a list): each attempt goes to the live endpoint with the fewest
requests in flight (`endpoint_pool`); a failing one is taken out with backoff and probed again,
and the request moves on to another, so a dead node costs its in-flight requests one retry each.
A request gets `(max_retries + 1) x endpoints` attempts in all. The trace header lists the
endpoints (`details.endpoints`) and each reply names the one that answered (`Completion.endpoint`).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import BackendUnavailable, ConfigError, MissingExtraError
from ..settings import get_settings
from ..types import BackendInfo, Completion, Conversation, FinishReason, GenParams, RequestMeta, row_seeds
from .endpoint_pool import Endpoint, EndpointPool, Outcome
from .stops import cut_at_stop, stop_strings

if TYPE_CHECKING:
    import httpx

    from ..registry import ModelSpec, OpenAIEndpoint

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_API_STOPS = 4
POLL_S = 0.05  # poll waits this long for a reply, so the runner also sees finished tools promptly
DEFAULT_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
RETRY_STATUSES = frozenset({408, 429}) | frozenset(range(500, 600))
# vLLM: "This model's maximum context length is 4096 tokens. However, your prompt contains at least 4097
# input tokens ..." (or "Input length (N) exceeds model's maximum context length"); OpenAI's code.
CONTEXT_ERROR = re.compile(r"maximum context length|context_length_exceeded", re.I)
PROMPT_TOKENS = re.compile(r"(\d+) input tokens|Input length \((\d+)\)")


class ContextTooLong(BackendUnavailable):
    """The server refused a prompt longer than its context; `prompt_tokens` when it said how long."""

    def __init__(self, message: str, prompt_tokens: int) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens


def fan_out(fn: Callable[..., T], calls: list[tuple[Any, ...]], workers: int) -> list[T]:
    """`fn(*call)` for each call, in order, on up to `workers` daemon threads; after a failure no further
    call starts, and the first failure (in order) is raised once the calls in flight are back.

    Daemon threads, not an executor: when the caller is interrupted (Ctrl-C, SIGTERM) it returns at
    once, and a request still in flight (up to `timeout_s`) holds neither the process nor its exit.
    """
    n = len(calls)
    results: list[Any] = [None] * n
    errors: list[BaseException | None] = [None] * n
    cond = threading.Condition()
    started = running = 0
    failed = False

    def work() -> None:
        nonlocal started, running, failed
        while True:
            with cond:
                if failed or started == n:
                    return
                i, started, running = started, started + 1, running + 1
            try:
                results[i] = fn(*calls[i])
            except BaseException as e:  # raised by the caller below
                errors[i] = e
            with cond:
                running -= 1
                failed = failed or errors[i] is not None
                cond.notify_all()

    for _ in range(min(workers, n)):
        threading.Thread(target=work, name="openai", daemon=True).start()
    with cond:
        while running or not (failed or started == n):
            cond.wait()  # a signal (Ctrl-C, SIGTERM) interrupts this wait
    for e in errors:
        if e is not None:
            raise e
    return results


def _backoff_base() -> float:
    backoff = get_settings().openai_backoff_s
    return DEFAULT_BACKOFF_S if backoff is None else backoff


def _retry_after(resp: httpx.Response) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or an HTTP date), if any."""
    raw = resp.headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _server_message(resp: httpx.Response) -> str:
    """The server's error message on one line (OpenAI's ``{"error": {"message": ...}}`` or the body)."""
    try:
        body = resp.json()
    except (json.JSONDecodeError, ValueError):
        body = None
    msg: Any = None
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg is None:
            msg = body.get("detail") or body.get("message")
    if msg is None:
        msg = resp.text
    line = " ".join(str(msg).split())
    return line[:300] + ("..." if len(line) > 300 else "")


class StreamCut(Exception):
    """A streamed reply that ended before its last chunk (the server went away mid-reply): retried."""


def _from_stream(lines: Iterator[str], url: str) -> dict[str, Any]:
    """A streamed chat completion (SSE `data:` chunks, then `[DONE]`) as the reply body the API gives
    without streaming: one choice with the whole text and its finish_reason, and the usage chunk."""
    parts: list[str] = []
    finish: str | None = None
    usage: dict[str, Any] = {}
    for line in lines:
        if not line.startswith("data:"):
            continue  # SSE comments, event names, blank separators
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            chunk = json.loads(payload)
        except (json.JSONDecodeError, ValueError):
            raise BackendUnavailable(f"{url}: a streamed chunk that is not JSON: {payload[:200]!r}") from None
        if not isinstance(chunk, dict):
            raise BackendUnavailable(f"{url}: a streamed chunk that is not an object: {payload[:200]!r}")
        if chunk.get("error"):
            err = chunk["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            raise BackendUnavailable(f"{url}: error mid-stream: {str(msg)[:300]}")
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                delta = choice.get("delta") or {}
                parts.append(str(delta.get("content") or choice.get("text") or ""))
                finish = choice.get("finish_reason") or finish
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
    else:
        if finish is None:
            raise StreamCut("the stream ended before its last chunk")
    return {"choices": [{"message": {"content": "".join(parts)}, "finish_reason": finish}], "usage": usage}


class OpenAIBackend:
    """Chat completions against an OpenAI-compatible server, a batch as parallel requests."""

    def __init__(self, spec: ModelSpec) -> None:
        try:
            import httpx
        except ImportError:
            raise MissingExtraError("the openai backend needs httpx: pip install httpx") from None
        if spec.openai is None:
            raise ConfigError(f"model '{spec.name}': backend 'openai' needs an 'openai' block")
        self.spec = spec
        self.endpoint: OpenAIEndpoint = spec.openai
        endpoints = []
        for base_url, key_env in zip(self.endpoint.urls(), self.endpoint.key_envs(), strict=True):
            headers = {"Content-Type": "application/json"}
            if key_env:
                key = os.environ.get(key_env)
                if not key:
                    raise BackendUnavailable(f"model '{spec.name}': the API key variable {key_env} is not set")
                headers["Authorization"] = f"Bearer {key}"
            endpoints.append(Endpoint(base_url, base_url.rstrip("/") + "/chat/completions", headers))
        self.url = endpoints[0].url
        self.backoff_s = _backoff_base()
        self.pool = EndpointPool(endpoints, self.backoff_s, MAX_BACKOFF_S, max_fails=self.endpoint.max_retries)
        self._rng = random.Random()
        self._rng_lock = threading.Lock()
        n = len(endpoints) * self.endpoint.concurrency
        self._slots = threading.BoundedSemaphore(n)  # requests in flight, streaming
        self._cv = threading.Condition()
        self._finished: list[tuple[str, Completion]] = []
        self._failed: list[BaseException] = []
        self._submitted = 0
        self.client: httpx.Client | None = httpx.Client(
            timeout=self.endpoint.timeout_s,
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
        )
        self.info = BackendInfo(
            requested="openai", used="openai", device="remote",
            details={"base_url": self.endpoint.base_url, "endpoints": [e.base_url for e in endpoints],
                     "model": self.endpoint.model, "concurrency": self.endpoint.concurrency,
                     "max_retries": self.endpoint.max_retries, "timeout_s": self.endpoint.timeout_s,
                     "httpx": httpx.__version__},
        )

    # -- one request -----------------------------------------------------------------------------
    def _payload(self, conv: Conversation, params: GenParams, stops: tuple[str, ...]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.endpoint.model, "messages": list(conv), "max_tokens": params.max_tokens,
            "temperature": params.temperature, "top_p": params.top_p,
        }
        if stops:
            body["stop"] = list(stops[:MAX_API_STOPS])
        if params.seed is not None:
            body["seed"] = params.seed
        if self.endpoint.stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        return body

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        with self._rng_lock:
            jitter = self._rng.uniform(0.5, 1.5)
        delay = min(MAX_BACKOFF_S, self.backoff_s * 2**attempt) * jitter
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_BACKOFF_S * 5))
        return delay

    def _post(self, body: dict[str, Any]) -> tuple[dict[str, Any], Endpoint]:
        """POST with retries and failover; (the parsed JSON reply, the endpoint that gave it), or
        BackendUnavailable / a 4xx error."""
        import httpx

        client = self.client
        if client is None:
            raise BackendUnavailable(f"openai backend for '{self.spec.name}' is closed")
        retries = self.endpoint.max_retries
        attempts = (retries + 1) * len(self.pool)
        last, last_url = "no attempt", self.url
        prev: Endpoint | None = None
        streak = 0  # attempts in a row on the same endpoint (its retry backoff)
        retry_after: float | None = None
        for attempt in range(attempts):
            ep, wait = self.pool.acquire()
            outcome: Outcome = "hard"
            try:
                streak = streak + 1 if ep is prev else 0
                if streak:
                    wait = max(wait, self._delay(streak - 1, retry_after))
                if attempt:
                    log.warning("%s: %s; retry %d/%d on %s in %.2f s", last_url, last, attempt, attempts - 1,
                                ep.base_url, wait)
                if wait > 0:
                    time.sleep(wait)
                prev, last_url, retry_after = ep, ep.url, None
                try:
                    with client.stream("POST", ep.url, json=body, headers=ep.headers) as resp:
                        if resp.status_code == 200 and "event-stream" in resp.headers.get("content-type", ""):
                            data = _from_stream(resp.iter_lines(), ep.url)
                        else:
                            data = None
                            resp.read()
                except httpx.TimeoutException as e:
                    outcome, last = "soft", f"timeout after {self.endpoint.timeout_s:g} s ({type(e).__name__})"
                    continue
                except httpx.TransportError as e:
                    last = f"connection error ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
                    continue
                except StreamCut as e:
                    outcome, last = "soft", str(e)
                    continue
                if resp.status_code == 200:
                    if data is None:
                        try:
                            data = resp.json()
                        except (json.JSONDecodeError, ValueError):
                            raise BackendUnavailable(
                                f"{ep.url}: HTTP 200 with a body that is not JSON: {resp.text[:200]!r}"
                            ) from None
                    if not isinstance(data, dict) or not data.get("choices"):
                        raise BackendUnavailable(f"{ep.url}: reply has no 'choices': {str(data)[:200]}")
                    outcome = "ok"
                    return data, ep
                msg = _server_message(resp)
                if resp.status_code not in RETRY_STATUSES:
                    outcome = "ok"  # the server is alive and answered: the request is at fault
                    if resp.status_code == 400 and CONTEXT_ERROR.search(resp.text[:2000]):
                        m = PROMPT_TOKENS.search(msg)
                        raise ContextTooLong(f"{ep.url}: HTTP 400: {msg}", int(next(filter(None, m.groups())))
                                             if m else 0)
                    raise BackendUnavailable(f"{ep.url}: HTTP {resp.status_code}: {msg}")
                outcome, last = "soft", f"HTTP {resp.status_code}: {msg}"
                retry_after = _retry_after(resp)
            finally:
                self.pool.release(ep, outcome, retry_after)
        where = f" on {len(self.pool)} endpoints" if len(self.pool) > 1 else ""
        raise BackendUnavailable(f"{last_url}: gave up after {attempts} attempt(s){where}; last: {last}")

    def _one(self, conv: Conversation, params: GenParams, stops: tuple[str, ...]) -> Completion:
        t0 = time.perf_counter()
        try:
            data, ep = self._post(self._payload(conv, params, stops))
        except ContextTooLong as e:  # this conversation is over, not the run
            log.warning("%s", e)
            return Completion("", e.prompt_tokens, 0, "length", time.perf_counter() - t0)
        latency = time.perf_counter() - t0
        choice = data["choices"][0]
        message = choice.get("message") or {}
        text = message.get("content") or choice.get("text") or ""
        reason = choice.get("finish_reason")
        finish: FinishReason = "length" if reason == "length" else "stop"
        cut = cut_at_stop(text, stops)
        if cut is not None:
            text, finish = cut, "stop"
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}  # OpenAI's and vLLM's prefix-cache count
        return Completion(
            text=text, prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            finish_reason=finish, latency_s=latency, cached_tokens=int(details.get("cached_tokens") or 0),
            endpoint=ep.base_url,
        )

    # -- the batch -------------------------------------------------------------------------------
    def generate(self, conversations: list[Conversation], params: GenParams,
                 seeds: Sequence[int | None] | None = None,
                 meta: Sequence[RequestMeta] | None = None) -> list[Completion]:
        """One Completion per conversation, in order; up to `concurrency` requests in flight.

        Request i carries `seeds[i]` when given (else `params.seed`) as the API's `seed`.
        """
        if params.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {params.max_tokens}")
        if not conversations:
            return []
        stops = stop_strings(params)
        n = len(conversations)
        rows = [params] * n if seeds is None else [replace(params, seed=s) for s in row_seeds(params, n, seeds)]
        workers = min(self.endpoint.concurrency * len(self.pool), len(conversations))
        calls = [(c, p, stops) for c, p in zip(conversations, rows, strict=True)]
        if workers == 1:
            return [self._one(*call) for call in calls]
        return fan_out(self._one, calls, workers)

    # -- streaming (StreamingBackend) ------------------------------------------------------------------
    def submit(self, key: str, conversation: Conversation, params: GenParams,
               meta: RequestMeta | None = None) -> None:
        """Send one conversation on a daemon thread (it waits for a free slot); `poll` returns its reply."""
        if self.client is None:
            raise BackendUnavailable(f"openai backend for '{self.spec.name}' is closed")
        if params.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {params.max_tokens}")
        call = (list(conversation), params, stop_strings(params))

        def work() -> None:
            with self._slots:
                try:
                    reply = self._one(*call)
                except BaseException as e:  # raised by poll, as generate would raise it
                    with self._cv:
                        self._failed.append(e)
                        self._cv.notify_all()
                    return
            with self._cv:
                self._finished.append((key, reply))
                self._cv.notify_all()

        with self._cv:
            self._submitted += 1
        threading.Thread(target=work, name="openai", daemon=True).start()

    def poll(self) -> list[tuple[str, Completion]]:
        """The replies that came back, after waiting up to POLL_S for one; a failed request (its retries
        spent) is raised here and stops the run, as from `generate`."""
        with self._cv:
            if self._submitted and not (self._finished or self._failed):
                self._cv.wait(POLL_S)
            if self._failed:
                self._submitted -= 1
                raise self._failed.pop(0)
            done, self._finished = self._finished, []
            self._submitted -= len(done)
        return done

    def pending(self) -> int:
        with self._cv:
            return self._submitted

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.close()


def create(spec: ModelSpec) -> OpenAIBackend:
    """Factory named in `backends.BACKENDS`."""
    return OpenAIBackend(spec)
