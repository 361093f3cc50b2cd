"""One definition per setting and one strategy registry: the CLI's flags, the trace header, the fingerprint and
the trace model's names come from them; traces stored by an earlier commit still get the same fingerprint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, get_args

import pytest

from agent_harness.cli import given_settings, run_parser
from agent_harness.registry import load_registry
from agent_harness.run import fingerprint
from agent_harness.run.episodes import STRATEGIES, default_strategy
from agent_harness.run.planning import RunConfig, model_jobs, plan_jobs
from agent_harness.scenarios import get_scenario, scenario_names
from agent_harness.strategies.config import AgentConfig, Flagged, ReflectConfig, added_values, build, settings
from agent_harness.strategies.react import AgentConfig as ReactAgentConfig
from agent_harness.tools import ToolOptions
from agent_harness.traces.model import OMIT_UNSET, AgentInfo, Mode, Strategy

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
GOLDEN = sorted((DATA / "golden_traces").rglob("run_*.json"))
# Traces written by commit 8986abe (schema 1.7), run from a `git archive` copy (harness_version "0.1.0"):
# `run_agents.py --models oracle --tasks Python/0 --no-embed --agent ...` with the flags their folder names.
OLD = sorted((DATA / "old_traces").rglob("run_*.json"))
CONFIGS: list[type] = [AgentConfig, ReflectConfig]


def _parse(*argv: str) -> Any:
    return run_parser().parse_args(list(argv))


def _sample(s: Flagged) -> list[str]:
    """Command-line words that set `s` to something other than its default."""
    if s.setting.switch:
        return [s.flag]
    if s.setting.choices:
        return [s.flag, next(c for c in s.setting.choices if c != s.default)]
    return [s.flag, "3" if s.setting.type is int else "1.5"]


def _get(config: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        config = getattr(config, name)
    return config


def test_agent_config_is_still_importable_and_built_by_keywords() -> None:
    assert ReactAgentConfig is AgentConfig
    cfg = AgentConfig(max_steps=3, demo=False, tool_options=ToolOptions(syntax_check=False))
    assert (cfg.max_steps, cfg.demo, cfg.tool_options.syntax_check, cfg.loop_temperature) == (3, False, False, 0.7)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_each_setting_has_one_flag_and_no_flag_keeps_the_defaults(config: type) -> None:
    flagged = list(settings(config))
    paths = [s.path for s in flagged]
    assert len(set(paths)) == len(paths) and len({s.flag for s in flagged}) == len(flagged)
    if config is AgentConfig:  # every field is a setting; tool_options through its three switches
        assert {p[0] for p in paths} == {f.name for f in fields(AgentConfig)}
        assert [p for p in paths if p[0] == "tool_options"] == [("tool_options", "syntax_check"),
                                                                ("tool_options", "extract_failure"),
                                                                ("tool_options", "show_values")]
    else:  # the temperatures schedule and the per-model recipe are no flags
        assert paths == [("iters",), ("draft",)]
    helps = run_parser().format_help()
    assert all(s.flag in helps for s in flagged)
    assert given_settings(_parse(), config) == {}
    assert build(config, given_settings(_parse(), config)) == config()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_each_flag_sets_its_own_setting_only(config: type) -> None:
    default = config()
    for s in settings(config):
        built = build(config, given_settings(_parse(*_sample(s)), config))
        assert _get(built, s.path) != _get(default, s.path), s.flag
        if s.setting.switch:
            assert _get(built, s.path) == s.setting.sets, s.flag
        if len(s.path) == 1:
            assert replace(built, **{s.path[0]: _get(default, s.path)}) == default, s.flag
        else:
            inner = replace(_get(built, s.path[:1]), **{s.path[1]: _get(default, s.path)})
            assert replace(built, **{s.path[0]: inner}) == default, s.flag


def test_flag_help_and_spelling_come_from_the_definition() -> None:
    by_flag = {s.flag: s for s in settings(AgentConfig)}
    assert by_flag["--no-loop-break"].path == ("loop_temperature",) and "0.7" in by_flag["--no-loop-break"].help
    assert by_flag["--no-stale-temperature"].path == ("stale_temperature",)
    assert "0.3" in by_flag["--no-stale-temperature"].help
    assert by_flag["--max-steps"].help.endswith("(default: 12)")
    assert by_flag["--no-syntax-check"].path == ("tool_options", "syntax_check")
    assert given_settings(_parse("--max-total-tokens", "0"), AgentConfig) == {("max_total_tokens",): None}
    assert given_settings(_parse("--no-submit-check", "--restart-after", "2"), AgentConfig) == {
        ("submit_checks",): 0, ("restart_after",): 2}


def test_dump_leaves_out_later_settings_while_they_behave_as_before() -> None:
    assert added_values(AgentConfig) == {"initial_tests": False, "initial_files": False, "restart_after": None,
                                         "protocol": "text", "tool_choice": "auto", "action_space": "tools",
                                         "demo_source": "builtin", "candidates": 4, "search_temperature": 0.8,
                                         "search_restart": True, "protect_tests": False, "prefer_changes": False,
                                         "tests_on_write": False, "search_branches": 0, "spread_branches": False,
                                         "deeper_branches": False,
                                         "opening_candidates": 16,
                                         "handoff": "given"}
    assert "protocol" not in AgentConfig(protocol="text").dump()
    assert "tool_choice" not in AgentConfig(protocol="native").dump()
    assert AgentConfig(protocol="native", tool_choice="required").dump()["tool_choice"] == "required"
    assert AgentConfig(protocol="native").dump()["protocol"] == "native"
    dump = AgentConfig().dump()
    assert dump["initial_tests"] is True and "initial_files" not in dump and "restart_after" not in dump
    assert "initial_tests" not in AgentConfig(initial_tests=False).dump()
    assert AgentConfig(restart_after=2, initial_files=True).dump()["restart_after"] == 2
    old = AgentConfig(initial_tests=False).dump()
    # missing: the behaviour before it (a trace's protocol is the resolved one: text)
    assert AgentConfig.from_dump(old) == AgentConfig(initial_tests=False, protocol="text")
    assert AgentConfig.from_dump(json.loads(json.dumps(dump))) == AgentConfig(protocol="text")
    assert ReflectConfig().record()["draft"] == "bigcode" == ReflectConfig().fingerprint()["draft"]
    assert "draft" not in ReflectConfig(draft="chat").fingerprint()  # the draft of traces before the setting


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: "/".join(p.parts[-5:-3]))
def test_the_dump_is_the_trace_header_and_the_fingerprint_input(path: Path) -> None:
    trace = json.loads(path.read_text())
    header = {k: v for k, v in trace["agent"].items() if k not in ("mode", "strategy", "concurrency", "reflect",
                                                                   "single_shot", "search")}
    want = STRATEGIES[trace["agent"]["strategy"]].recorded(AgentConfig(protocol=trace["agent"].get("protocol"))).dump()
    assert header == trace["fingerprint"]["config"]["agent"] == json.loads(json.dumps(want))


def test_agent_info_records_every_setting() -> None:
    info = AgentInfo.model_fields
    for f in fields(AgentConfig):
        assert f.name in info, f"trace_model.AgentInfo has no field for AgentConfig.{f.name}"
        assert (OMIT_UNSET in info[f.name].metadata) == (f.name in added_values(AgentConfig)), f.name


def test_the_registry_is_the_one_list_of_strategies() -> None:
    assert get_args(Strategy) == tuple(STRATEGIES)
    assert set(get_args(Mode)) == {s.mode for s in STRATEGIES.values()}
    [agent] = [a for a in run_parser()._actions if a.dest == "agent"]
    assert list(agent.choices or ()) == [s.flag for s in STRATEGIES.values()]
    folders = {(p.parts[-5], p.parts[-3]) for p in GOLDEN}  # (the --agent spelling, the trace folder)
    assert folders == {(s.flag, s.dirname("humanevalfix")) for s in STRATEGIES.values()} | {
        (f"{s.flag}-native", s.dirname("humanevalfix", "native")) for s in STRATEGIES.values() if s.uses_tools}
    for p in GOLDEN:
        flag = p.parts[-5].removesuffix("-native")
        assert json.loads(p.read_text())["agent"]["strategy"] == {s.flag: n for n, s in STRATEGIES.items()}[flag]


def test_each_scenario_defaults_to_the_best_strategy_it_supports() -> None:
    reflect = ReflectConfig()
    defaults = {name: default_strategy(get_scenario(name), reflect).name for name in scenario_names()}
    calibrated = {"humanevalfix", "bogus"}  # a bigcode-style prompt and one function; the YAML ones use tools only
    assert defaults == {name: "branch_search" if name in calibrated else "react" for name in scenario_names()}
    assert len(defaults) > len(calibrated)
    unscored = {name: default_strategy(get_scenario(name), reflect, scores=False).name for name in scenario_names()}
    assert unscored == {name: "best_of_n_search" if name in calibrated else "react" for name in scenario_names()}
    for name in scenario_names():
        assert STRATEGIES["react"].supports(get_scenario(name), reflect)
        assert STRATEGIES["branch_search"].supports(get_scenario(name), reflect) == (name in calibrated)
        assert STRATEGIES["best_of_n_search"].supports(get_scenario(name), reflect) == (name in calibrated)
        assert STRATEGIES["reflect_react"].supports(get_scenario(name), reflect) == (name in calibrated)


def test_a_default_runs_with_the_settings_it_was_measured_with_unless_given() -> None:
    """Without --agent, branch-search adds --search-branches 32 --spread-branches --deeper-branches
    --initial-files (where the flags do not give them, under the text protocol); an explicit --agent
    branch-search runs as its flags say."""
    registry = load_registry(ROOT / "models.yaml")
    [oracle] = registry.resolve("oracle")

    def agent(strategy: str | None, given: frozenset[str] | None = None, **settings: Any) -> AgentConfig:
        cfg = RunConfig(models=[oracle], out=Path("unused"), embed=False, strategy=strategy,
                        agent=AgentConfig(**settings), given=given)
        return cfg.agent_for(oracle, "branch_search")

    assert (agent(None).search_branches, agent(None).spread_branches, agent(None).deeper_branches,
            agent(None).initial_files) == (32, True, True, True)
    assert (agent("branch_search").search_branches, agent("branch_search").initial_files) == (0, False)
    assert agent(None, search_branches=8).search_branches == 8  # away from its default: given
    assert agent(None, frozenset({"search_branches"})).search_branches == 0  # given on the command line as 0
    assert agent(None, protocol="native").search_branches == 0  # measured under text; branches prefill text
    assert agent(None).dump()["search_branches"] == 32  # recorded: the fingerprint and the header say it


def test_a_default_the_backend_cannot_run_gives_way_to_the_next_with_a_note(capsys: pytest.CaptureFixture[str]) \
        -> None:
    registry = load_registry(ROOT / "models.yaml")
    [oracle, server] = registry.resolve("oracle,local-server")  # the server's prompts are text: it cannot score
    cfg = RunConfig(models=[oracle, server], scenarios=["humanevalfix", "repo_bugfix"], n=1, out=Path("unused"),
                    embed=False)
    planned = [j for _, _, jobs in plan_jobs(cfg) for j in jobs]
    ran = {spec.name: {j.scenario_name: j.strategy for j in model_jobs(cfg, spec, planned)}
           for spec in (oracle, server)}
    assert ran == {"oracle": {"humanevalfix": "branch_search", "repo_bugfix": "react"},
                   "local-server": {"humanevalfix": "best_of_n_search", "repo_bugfix": "react"}}
    assert capsys.readouterr().err.strip() == (
        "model 'local-server': humanevalfix runs best-of-n-search, not its default branch-search, which reads the "
        "model's log-probabilities of a given reply that its backend (openai) cannot give")
    assert cfg.agent_for(server, "best_of_n_search").search_branches == 0  # the presets are branch-search's


def test_the_search_settings_are_recorded_where_search_runs_only() -> None:
    [spec] = load_registry(ROOT / "models.yaml").resolve("oracle")
    on, off = (RunConfig(models=[spec], out=Path("unused"), embed=False,
                         agent=AgentConfig(protect_tests=p, prefer_changes=p, tests_on_write=p))
               for p in (True, False))
    searching = {name for name, info in STRATEGIES.items() if info.searches}
    assert searching == {"search", "reflect_search", "best_of_n_search", "branch_search"}
    for name in STRATEGIES:  # recorded where it applies; elsewhere as before it existed, so older traces match
        for setting in ("protect_tests", "prefer_changes", "tests_on_write"):
            assert on.agent_for(spec, name).dump().get(setting) is (True if name in searching else None)
            assert setting not in off.agent_for(spec, name).dump()


def test_the_opening_size_is_recorded_by_the_strategies_that_read_it_only() -> None:
    [spec] = load_registry(ROOT / "models.yaml").resolve("oracle")
    opening = {name for name, info in STRATEGIES.items() if info.opens}
    assert opening == {"best_of_n_search", "branch", "branch_search"}  # best-of-n's samples, or branch's programs
    for n, before in ((32, False), (16, True)):  # 16 is the value from before the setting existed
        config = RunConfig(models=[spec], out=Path("unused"), embed=False, agent=AgentConfig(opening_candidates=n))
        for name in STRATEGIES:  # react's or search's fingerprint stays as it was when the chain's default moves
            recorded = config.agent_for(spec, name).dump().get("opening_candidates")
            assert recorded == (None if before or name not in opening else n), (name, n)


def _config_of(trace: dict[str, Any], strategy: str | None) -> tuple[RunConfig, Any]:
    """The run configuration a stored trace records, as `run_agents.py` would build it now."""
    agent, config = trace["agent"], trace["fingerprint"]["config"]
    [spec] = load_registry(ROOT / "models.yaml").resolve(trace["model"]["name"])
    reflect = ReflectConfig(**{k: tuple(v) if k == "temperatures" else v for k, v in agent.get("reflect", {}).items()
                               if k in ("iters", "temperatures", "draft")})
    return RunConfig(models=[spec], scenarios=[config["scenario"]], labels=[trace["label"]],
                     task_ids=(trace["task_id"],), out=Path("unused"), seed=trace["generation"]["seed"],
                     embed=False, strategy=strategy, agent=AgentConfig.from_dump(agent), reflect=reflect), spec


def _fingerprint_now(trace: dict[str, Any], strategy: str | None) -> dict[str, Any]:
    cfg, spec = _config_of(trace, strategy)
    [job] = model_jobs(cfg, spec, [j for _, _, jobs in plan_jobs(cfg) for j in jobs])
    assert job.path.relative_to(cfg.out).as_posix().endswith(f"{trace['scenario']}/{trace['label']}/"
                                                             f"run_Python-0__s0.json")
    return job.fingerprint


@pytest.mark.parametrize("path", OLD, ids=lambda p: p.parts[-5])
def test_a_stored_old_trace_gets_the_same_fingerprint_now(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = json.loads(path.read_text())
    monkeypatch.setattr(fingerprint, "harness_version", lambda: trace["harness_version"])  # the one thing it names
    now = _fingerprint_now(trace, trace["agent"]["strategy"])
    assert now["config"] == trace["fingerprint"]["config"]
    assert now["hash"] == trace["fingerprint"]["hash"] and now["run_hash"] == trace["fingerprint"]["run_hash"]
    if trace["agent"]["strategy"] == default_strategy(get_scenario("humanevalfix"), ReflectConfig()).name:
        # the default: a run without --agent resumes it
        assert _fingerprint_now(trace, None)["hash"] == trace["fingerprint"]["hash"]


def test_the_stored_old_traces_cover_the_later_settings() -> None:
    agents = {p.parts[-5]: json.loads(p.read_text())["fingerprint"]["config"]["agent"] for p in OLD}
    assert "initial_tests" not in agents["react-no-initial-tests"] and agents["react"]["initial_tests"] is True
    assert agents["react-switches"]["restart_after"] == 2 and "restart_after" not in agents["react"]
    assert {json.loads(p.read_text())["agent"]["strategy"] for p in OLD} == {"react", "reflect", "reflect_react"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--no-embed", "--no-progress", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_without_agent_each_scenario_runs_its_default_and_the_trace_names_it(tmp_path: Path) -> None:
    out = tmp_path / "t"
    r = _cli("--models", "oracle", "--n", "1", "--scenario", "humanevalfix,repo_bugfix", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert ("strategy: branch-search --search-branches 32 --spread-branches --deeper-branches --initial-files on "
            "humanevalfix; "
            "react on repo_bugfix "
            "(each scenario's default") in r.stdout
    traces = {p.relative_to(out).parts[1]: json.loads(p.read_text()) for p in out.rglob("run_*.json")}
    assert {k: t["agent"]["strategy"] for k, t in traces.items()} == {
        "humanevalfix-branch_search": "branch_search", "repo_bugfix": "react"}
    assert all(t["outcome"]["passed"] for t in traces.values())
    header = traces["humanevalfix-branch_search"]["agent"]
    assert (header["search_branches"], header["spread_branches"], header["deeper_branches"],
            header["initial_files"]) == (32, True, True, True)

    # an explicit --agent applies to every scenario, as its flags say: with the default's, it finds its traces done
    r = _cli("--models", "oracle", "--n", "1", "--agent", "branch-search", "--search-branches", "32",
             "--spread-branches", "--deeper-branches", "--initial-files", "--out", str(out), "--resume")
    assert r.returncode == 0 and "resume: reused 1, redid 0" in r.stderr, r.stderr
    assert "strategy:" not in r.stdout
    r = _cli("--models", "oracle", "--n", "1", "--search-branches", "0", "--out", str(out), "--resume")
    assert r.returncode == 0 and "resume: reused 0, redid 1 (1 config changed" in r.stderr, r.stderr
    assert ("strategy: branch-search --spread-branches --deeper-branches --initial-files on humanevalfix (each "
            "scenario's default"
            in r.stdout)

    r = _cli("--models", "oracle", "--n", "1", "--scenario", "repo_bugfix", "--iters", "2", "--out", str(out))
    assert r.returncode == 2
    assert r.stderr.strip() == "error: --iters applies to --agent reflect, reflect-react and reflect-search only"
    r = _cli("--models", "oracle", "--n", "1", "--scenario", "repo_bugfix", "--agent", "reflect", "--out", str(out))
    assert r.returncode == 2 and "cannot run --agent reflect" in r.stderr
