"""OpenAI-compatible backend: the scale-out path.

Many harness workers share one inference service (a `vllm serve` cluster behind a load balancer,
TGI, a llama.cpp server): each worker sends its batch as `concurrency` parallel
``POST {base_url}/chat/completions`` requests and gets the results back in order. No model is
loaded here; the server decides dtype, batching and caching.

With `openai.tokenizer` set, prompts are encoded here and sent as token ids to `{base_url}/completions`
(`openai_prompt`), and the token budget is the local backends' (what the prompt leaves of `context_length`).

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

A server's reply is hostile input (`openai_reply`): one request has `deadline_s` in all (retries and
a streamed reply included; keep-alive comments or an endless stream of tokens end there), its reply
at most a number of bytes and characters derived from `max_tokens`, JSON nested at most
`MAX_DEPTH` deep, the chat completion's shape checked, and `usage` counts kept only when they are
ints in range (else None: unknown). A reply that fails any of these is not retried: its Completion
carries `error` (one line), the runner ends that episode with exit "error", and the run goes on.

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

import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import BackendError, BackendUnavailable, ConfigError, MissingExtraError
from ..settings import get_settings
from ..types import BackendInfo, Completion, Conversation, FinishReason, GenParams, RequestMeta, row_seeds
from .endpoint_pool import Endpoint, EndpointPool, Outcome
from .local import context_full, first_line, new_token_budget
from .openai_prompt import Prompt, PromptEncoder
from .openai_reply import (
    ERROR_BODY_BYTES,
    BadReply,
    MidStreamError,
    Reply,
    ReplyCaps,
    StreamReply,
    body_reply,
    capped,
    decoded,
    error_message,
    head,
    lines,
    one_line,
    parse_json,
    usage_counts,
)
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

    def __init__(self, message: str, prompt_tokens: int | None) -> None:
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


class StreamCut(Exception):
    """A streamed reply that ended before its last chunk (the server went away mid-reply): retried."""


def _read_reply(resp: httpx.Response, caps: ReplyCaps, deadline: float) -> Reply:
    """A 200 reply, streamed (SSE) or whole JSON, read within `caps` and `deadline`; BadReply if it is not
    a usable chat completion, StreamCut if a stream ended early."""
    declared = resp.headers.get("content-length", "").strip()
    if declared.isascii() and declared.isdigit() and (len(declared) > 15 or int(declared) > caps.bytes):
        raise BadReply(f"reply of {one_line(declared, 20)} bytes is larger than its cap of {caps.bytes} bytes")
    chunks = capped(decoded(resp.iter_raw(), resp.headers.get("content-encoding", ""), caps.bytes), caps.bytes,
                    deadline)
    if "event-stream" not in resp.headers.get("content-type", ""):
        return body_reply(parse_json(b"".join(chunks)), caps)
    stream = StreamReply(caps)
    for line in lines(chunks):
        stream.feed(line)
        if stream.done:
            break
    else:
        if stream.finish is None:
            raise StreamCut("the stream ended before its last chunk")
    return stream.result()


class OpenAIBackend:
    """Chat completions (or completions of token ids) against an OpenAI-compatible server, a batch as
    parallel requests."""

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
                headers["Authorization"] = f"Bearer {key}"
            endpoints.append(Endpoint(base_url, base_url.rstrip("/") + self.prompts.path, headers))
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
                     "deadline_s": self.endpoint.deadline_s, "reply_caps": ReplyCaps.describe(),
                     "httpx": httpx.__version__, **self.prompts.details()},
        )

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

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        with self._rng_lock:
            jitter = self._rng.uniform(0.5, 1.5)
        delay = min(MAX_BACKOFF_S, self.backoff_s * 2**attempt) * jitter
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_BACKOFF_S * 5))
        return delay

    def _post(self, body: dict[str, Any], caps: ReplyCaps, deadline: float) -> tuple[Reply, Endpoint]:
        """POST with retries and failover until `deadline` (monotonic); (the validated reply, the endpoint
        that gave it), or BadReply (a bad reply, or none before the deadline), BackendUnavailable (retries
        spent, or a 4xx)."""
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
            streak = streak + 1 if ep is prev else 0
            if streak:
                wait = max(wait, self._delay(streak - 1, retry_after))
            if time.monotonic() + wait >= deadline:
                self.pool.cancel(ep)
                raise BadReply(f"{last_url}: no reply before the request's deadline ({self.endpoint.deadline_s:g} s) "
                               f"after {attempt} attempt(s); last: {last}")
            outcome: Outcome = "hard"
            try:
                if attempt:
                    log.warning("%s: %s; retry %d/%d on %s in %.2f s", last_url, last, attempt, attempts - 1,
                                ep.base_url, wait)
                if wait > 0:
                    time.sleep(wait)
                prev, last_url, retry_after = ep, ep.url, None
                # a silent server is cut at the deadline too, not only after timeout_s
                timeout = min(self.endpoint.timeout_s, max(0.01, deadline - time.monotonic()))
                try:
                    with client.stream("POST", ep.url, json=body, headers=ep.headers, timeout=timeout) as resp:
                        status, error_body = resp.status_code, b""
                        if status == 200:
                            reply = _read_reply(resp, caps, deadline)
                        else:
                            error_body = head(resp.iter_raw(), ERROR_BODY_BYTES, deadline)
                            retry_after = _retry_after(resp)
                except httpx.TimeoutException as e:
                    outcome, last = "soft", f"timeout after {timeout:g} s ({type(e).__name__})"
                    continue
                except httpx.TransportError as e:
                    last = f"connection error ({type(e).__name__}: {one_line(str(e), 200)})"
                    continue
                except (StreamCut, MidStreamError) as e:
                    outcome, last = "soft", str(e)
                    continue
                except BadReply as e:
                    outcome = "soft"
                    raise BadReply(f"{ep.url}: {e}") from None
                if status == 200:
                    outcome = "ok"
                    return reply, ep
                msg = error_message(error_body)
                if status not in RETRY_STATUSES:
                    outcome = "ok"  # the server is alive and answered: the request is at fault
                    if status == 400 and CONTEXT_ERROR.search(error_body[:2000].decode("utf-8", "replace")):
                        m = PROMPT_TOKENS.search(msg)
                        said = next(filter(None, m.groups())) if m else ""
                        raise ContextTooLong(f"{ep.url}: HTTP 400: {msg}", int(said) if len(said) < 12 else None)
                    raise BackendUnavailable(f"{ep.url}: HTTP {status}: {msg}")
                outcome, last = "soft", f"HTTP {status}: {msg}"
            finally:
                self.pool.release(ep, outcome, retry_after)
        if time.monotonic() >= deadline:  # the last attempt ran into the deadline: as above, the episode ends
            raise BadReply(f"{last_url}: no reply before the request's deadline ({self.endpoint.deadline_s:g} s) "
                           f"after {attempts} attempt(s); last: {last}")
        where = f" on {len(self.pool)} endpoints" if len(self.pool) > 1 else ""
        raise BackendUnavailable(f"{last_url}: gave up after {attempts} attempt(s){where}; last: {last}")

    def _one(self, conv: Conversation, params: GenParams, stops: tuple[str, ...]) -> Completion:
        """One request's Completion; a bad reply is a Completion with `error` set (its episode ends there)."""
        t0 = time.perf_counter()
        try:
            req = self.prompts.prompt(conv, params.chat_template)
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
        deadline = time.monotonic() + self.endpoint.deadline_s
        try:
            reply, ep = self._post(self._payload(req, params, stops), caps, deadline)
        except ContextTooLong as e:  # this conversation is over, not the run
            log.warning("%s", e)
            said = e.prompt_tokens if e.prompt_tokens is not None and e.prompt_tokens <= bound else None
            return Completion("", said, 0, "length", time.perf_counter() - t0)
        except BadReply as e:
            log.warning("%s", e)
            return Completion("", None, None, "error", time.perf_counter() - t0, cached_tokens=None, error=str(e))
        latency = time.perf_counter() - t0
        text = reply.text
        finish: FinishReason = "length" if reply.finish_reason == "length" else "stop"
        cut = cut_at_stop(text, stops)
        if cut is not None:
            text, finish = cut, "stop"
        prompt, completion, cached = usage_counts(reply.usage, params.max_tokens, bound)
        return Completion(text=text, prompt_tokens=prompt, completion_tokens=completion, finish_reason=finish,
                          latency_s=latency, cached_tokens=cached, endpoint=ep.base_url)

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
