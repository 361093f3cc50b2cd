"""What the analyses compare: an arm is a model under one harness, tool-calling protocol and strategy
configuration. `with_arms` fills in the columns that name one (and the task's scenario), `arm_names` names
them; compare_models, the report and trajectory_similarity all name arms through here, so none pools two.
"""

from __future__ import annotations

import hashlib
import json

import pandas as pd

from ..traces.model import NATIVE_HARNESS
from ..traces.store import task_scenario

GROUP = ["harness", "model", "protocol", "config", "scenario", "label"]
# What is compared: a model under one harness, tool-calling protocol and strategy configuration.
ARM = ["harness", "model", "protocol", "config"]
MAX_LABEL_SETTINGS = 3  # settings a configuration's label names (the rest are counted)
MAX_LABEL_VALUE = 30  # characters of a setting's value in a label
UNSET = "–"  # a setting a trace does not record (the default of the harness that wrote it)


def _flat(settings: str) -> dict[str, str]:
    """A `settings` column's JSON as one level of dotted names (a nested object's fields), values as JSON."""
    try:
        data = json.loads(settings)
    except (TypeError, ValueError):
        return {}
    out: dict[str, str] = {}
    for key, value in (data.items() if isinstance(data, dict) else ()):
        inner = value.items() if isinstance(value, dict) and value else [("", value)]
        for sub, v in inner:
            out[f"{key}.{sub}" if sub else key] = json.dumps(v, sort_keys=True, ensure_ascii=False)
    return out


def _labels(strategy: str, settings: list[str]) -> dict[str, str]:
    """Each configuration of one strategy named by the settings in which they differ: "branch_search" alone
    when there is one, else "branch_search (deeper_branches=true)" beside "branch_search (deeper_branches=–)"."""
    if len(settings) == 1:
        return {settings[0]: strategy}
    flat = {s: _flat(s) for s in settings}
    keys = sorted(set().union(*flat.values()))
    differ = [k for k in keys if len({f.get(k, UNSET) for f in flat.values()}) > 1]
    # A setting of its own (deeper_branches) says more than the strategy's record of how it ran (search.rank):
    # the nested fields are named only when no top-level one differs.
    differ = [k for k in differ if "." not in k] or differ
    labels: dict[str, str] = {}
    for s, f in flat.items():
        parts = [f"{k}={f.get(k, UNSET)[:MAX_LABEL_VALUE]}" for k in differ[:MAX_LABEL_SETTINGS]]
        more = f", {len(differ) - MAX_LABEL_SETTINGS} more" if len(differ) > MAX_LABEL_SETTINGS else ""
        labels[s] = f"{strategy} ({', '.join(parts)}{more})"
    if len(set(labels.values())) < len(labels):  # they differ beyond what the label shows
        digest = {s: hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()[:6] for s in labels}
        labels = {s: f"{label} #{digest[s]}" for s, label in labels.items()}
    return labels


def _strategies(runs: pd.DataFrame) -> pd.Series:
    """Each row's strategy: `agent.strategy`, else (traces before 1.3) its older name `mode` ('agent': react)."""
    mode = runs["mode"].fillna("agent").astype(str) if "mode" in runs else pd.Series("agent", index=runs.index)
    older = mode.where(mode != "agent", "react")
    return runs["strategy"].fillna(older).astype(str) if "strategy" in runs else older


def _base_scenarios(runs: pd.DataFrame) -> pd.Series:
    """The scenario each task belongs to: a trace of this harness names its folder (`scenario_folder`); that
    is undone (`task_scenario`), so the strategies and protocols of one model meet on the same tasks. Imported
    episodes keep theirs."""
    choice = runs["tool_choice"].fillna("auto").astype(str) if "tool_choice" in runs else "auto"
    cols = pd.DataFrame({"s": runs["scenario"].astype(str), "h": runs["harness"], "st": runs["strategy"],
                         "p": runs["protocol"].str.removesuffix("-required"), "c": choice}, index=runs.index)
    return pd.Series([s if h != NATIVE_HARNESS else task_scenario(s, st, p, c)
                      for s, h, st, p, c in cols.itertuples(index=False, name=None)], index=runs.index, dtype=object)


def with_arms(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with what names an arm: `harness` (this one where missing), `protocol` ("text" where missing or
    null: traces before native calls; "native-required" for native episodes run with tool_choice required, an
    arm of its own), `strategy` and `config` (the strategy, with the settings that tell its configurations
    apart when the runs hold several of one harness), and `scenario` the task's (`_base_scenarios`)."""
    if "config" in runs:  # done already
        return runs
    harness = runs["harness"].fillna(NATIVE_HARNESS).astype(str) if "harness" in runs else NATIVE_HARNESS
    runs = runs.assign(harness=harness)
    protocol = runs["protocol"].fillna("text").astype(str) if "protocol" in runs else pd.Series("text", runs.index)
    if "tool_choice" in runs:
        protocol = protocol.where(runs["tool_choice"].fillna("auto") != "required", protocol + "-required")
    settings = runs["settings"].fillna("{}").astype(str) if "settings" in runs else "{}"
    runs = runs.assign(protocol=protocol, strategy=_strategies(runs), settings=settings)
    config = pd.Series("", index=runs.index, dtype=object)
    for (_, strategy), group in runs.groupby(["harness", "strategy"], sort=False):
        labels = _labels(str(strategy), sorted(group["settings"].unique()))
        config[group.index] = group["settings"].map(labels)
    return runs.assign(config=config, scenario=_base_scenarios(runs))


def several_protocols(runs: pd.DataFrame) -> bool:
    """Whether the runs hold more than one protocol (then arms are named "model (protocol)")."""
    return "protocol" in runs and runs["protocol"].fillna("text").nunique() > 1


def several_harnesses(runs: pd.DataFrame) -> bool:
    """Whether the runs hold episodes of more than one harness (then arms are named "model [harness]")."""
    return "harness" in runs and runs["harness"].fillna(NATIVE_HARNESS).nunique() > 1


def several_configs(runs: pd.DataFrame) -> bool:
    """Whether the runs hold more than one strategy configuration (then arms are named "model · config")."""
    return "config" in runs and runs["config"].nunique() > 1


def arm_names(df: pd.DataFrame, several: bool | None = None, harnesses: bool | None = None,
              configs: bool | None = None) -> pd.Series:
    """Each row's arm: its model, "model (protocol)" when `several` (default: the rows hold several protocols),
    " [harness]" after it when `harnesses` (default: the rows hold several harnesses), and " · config" when
    `configs` (default: the rows hold several strategy configurations)."""
    df = with_arms(df)
    several = several_protocols(df) if several is None else several
    harnesses = several_harnesses(df) if harnesses is None else harnesses
    configs = several_configs(df) if configs is None else configs
    model = df["model"].astype(str)
    name = model + " (" + df["protocol"] + ")" if several else model
    name = name + " [" + df["harness"] + "]" if harnesses else name
    return name + " · " + df["config"].astype(str) if configs else name
