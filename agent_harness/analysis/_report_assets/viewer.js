// Trace viewer. All trace text is set with textContent: it is never parsed as HTML.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("trace-data").textContent);
  var taskSel = document.getElementById("task");
  var sampleSel = document.getElementById("sample");
  var columns = document.getElementById("columns");
  var promptText = document.getElementById("prompt-text");
  var KIND = { thought: "thought", tool_call: "tool call", tool_result: "observation", final: "final answer",
               parse_error: "parse error" };

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function diffBlock(diff) {
    var pre = el("pre", "diff");
    diff.split("\n").forEach(function (line) {
      var cls = line.startsWith("+") && !line.startsWith("+++") ? "add"
        : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : null;
      pre.appendChild(el("span", cls, line + "\n"));
    });
    return pre;
  }

  function stepBlock(s) {
    var d = el("div", "step " + String(s.type).replace(/[^a-z_]/g, ""));
    d.appendChild(el("div", "kind", (KIND[s.type] || s.type) + (s.turn !== null && s.turn !== undefined ? " · turn " + s.turn : "")));
    if (s.type === "tool_call") {
      d.appendChild(el("div", "text", s.tool || "?"));
      if (s.args) d.appendChild(el("pre", "args", s.args));
    } else if (s.type === "tool_result" || s.type === "parse_error") {
      d.appendChild(el("pre", null, s.text));
    } else {
      d.appendChild(el("div", "text", s.text));
    }
    return d;
  }

  function column(ep, taskPrompt) {
    var verdict = ep.unscored ? "unscored" : (ep.passed ? "pass" : "fail");
    var col = el("div", "col " + verdict);
    var head = el("div", "colhead");
    head.appendChild(el("span", "model", ep.model));
    head.appendChild(el("span", "badge " + verdict, verdict.toUpperCase()));
    if (ep.compromised) head.appendChild(el("span", "badge comp", "COMPROMISED"));
    if (ep.suspicious) head.appendChild(el("span", "badge comp", "SUSPICIOUS"));
    var bits = ["sample " + ep.sample, "exit: " + (ep.exit_reason || "?"), ep.turns + " turns", ep.tokens + " tokens"];
    if (ep.elapsed !== null && ep.elapsed !== undefined) bits.push(Number(ep.elapsed).toFixed(1) + " s");
    head.appendChild(el("div", "muted", bits.join(" · ")));
    if (ep.score_error) head.appendChild(el("div", "muted", "no verdict, the scorer failed: " + ep.score_error));
    if (ep.suspicious) head.appendChild(el("div", "muted", "suspicious (failed): " + ep.suspicious));
    if (ep.error) head.appendChild(el("div", "muted", "error: " + ep.error));
    col.appendChild(head);
    if (ep.prompt && ep.prompt !== taskPrompt) {  // another harness asked in its own words: shown in its column
      var asked = el("details");
      asked.appendChild(el("summary", null, "task prompt (this column's)"));
      asked.appendChild(el("pre", null, ep.prompt));
      col.appendChild(asked);
    }
    var steps = el("div", "steps");
    ep.steps.forEach(function (s) { steps.appendChild(stepBlock(s)); });
    if (!ep.steps.length) steps.appendChild(el("div", "muted", "(no steps)"));
    col.appendChild(steps);
    var extra = el("div", "extra");
    var diff = el("details");
    diff.open = true;
    diff.appendChild(el("summary", null, "final diff"));
    diff.appendChild(ep.diff ? diffBlock(ep.diff) : el("div", "muted", "(no change)"));
    extra.appendChild(diff);
    if (ep.test_output) {
      var tests = el("details");
      tests.appendChild(el("summary", null, "test output"));
      tests.appendChild(el("pre", null, ep.test_output));
      extra.appendChild(tests);
    }
    col.appendChild(extra);
    return col;
  }

  function render() {
    columns.replaceChildren();
    var task = data.tasks[Number(taskSel.value)];
    if (!task) { columns.appendChild(el("p", "muted", "No episodes to show.")); return; }
    var eps = task.episodes.map(function (i) { return data.episodes[i]; });
    var wanted = sampleSel.value;
    var shown = eps.filter(function (ep) { return wanted === "all" || String(ep.sample) === wanted; });
    promptText.textContent = eps.length ? eps[0].prompt : "";
    shown.forEach(function (ep) { columns.appendChild(column(ep, promptText.textContent)); });
  }

  function fillSamples() {
    var task = data.tasks[Number(taskSel.value)];
    var seen = {};
    (task ? task.episodes : []).forEach(function (i) { seen[data.episodes[i].sample] = true; });
    var samples = Object.keys(seen).map(Number).sort(function (a, b) { return a - b; });
    sampleSel.replaceChildren();
    samples.forEach(function (s) { var o = el("option", null, String(s)); o.value = String(s); sampleSel.appendChild(o); });
    if (samples.length > 1) { var all = el("option", null, "all"); all.value = "all"; sampleSel.appendChild(all); }
    sampleSel.disabled = samples.length < 2;
  }

  data.tasks.forEach(function (t, i) {
    var eps = t.episodes.map(function (j) { return data.episodes[j]; });
    var ok = eps.filter(function (ep) { return ep.passed; }).length;
    var unscored = eps.filter(function (ep) { return ep.unscored; }).length;
    var o = el("option", null, t.scenario + " / " + t.label + " / " + t.task_id + "  (" + ok + "/" + eps.length +
               " passed" + (unscored ? ", " + unscored + " unscored" : "") + ")");
    o.value = String(i);
    taskSel.appendChild(o);
  });
  taskSel.addEventListener("change", function () { fillSamples(); render(); });
  sampleSel.addEventListener("change", render);
  fillSamples();
  render();
})();
