// Lays out the report's tables from the embedded rows (the same rows as table.json).
// A results cell: <td data-row=INDEX data-key=KEY data-value=RAW> with the shown number in
// span.num and its CI in span.ci; #metric=KEY in the address picks the metric shown.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("zoo-data").textContent);
  var rows = data.table.rows;

  function num(v) {
    if (v === null || v === undefined || typeof v === "boolean") return NaN;
    return Number(v);  // "NaN", "Infinity", "-Infinity" stand for JSON's missing numbers
  }

  function fmt(x, digits) {
    if (Number.isNaN(x)) return "\u2013";
    if (x === Infinity) return "\u221e";
    if (x === -Infinity) return "-\u221e";
    return x.toFixed(digits);
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function wanted() {
    var match = /(?:^#|&)metric=([^&]+)/.exec(window.location.hash);
    return match ? decodeURIComponent(match[1]) : null;
  }

  function valueOf(index, metric) {
    if (index === null) return NaN;
    var row = rows[index];
    if (row.status === "failed" || row.status === "missing") return NaN;
    return num(row[metric.key]) * metric.scale;
  }

  function resultCell(index, metric, best) {
    if (index === null) return el("td", {"class": "missing"}, "\u2013");
    var row = rows[index];
    if (row.status === "failed") return el("td", {"class": "failed", "data-row": index}, "FAILED");
    if (row.status === "missing") return el("td", {"class": "missing", "data-row": index}, "\u2013");
    var raw = row[metric.key];
    var value = num(raw) * metric.scale;
    var td = el("td", {"data-row": index, "data-key": metric.key,
                       "data-value": raw === undefined ? "" : String(raw)});
    td.appendChild(el("span", {"class": "num"}, fmt(value, metric.digits)));
    if (metric.ci && row[metric.ci] !== undefined) {
      var ci = num(row[metric.ci]) * metric.scale;
      if (!Number.isNaN(ci)) td.appendChild(el("span", {"class": "ci"}, " \u00b1 " + fmt(ci, metric.digits)));
    }
    if (row.seeds > 1) {
      var seeds = el("span", {"class": "seeds"}, row.seeds + " seeds");
      if (row.seed_mean !== undefined && metric.key === data.headlines[row.task]) {
        seeds.title = "mean over seeds " + fmt(num(row.seed_mean) * metric.scale, metric.digits) +
          " \u00b1 " + fmt(num(row.seed_ci95) * metric.scale, metric.digits) + " (95% CI over seeds)";
      }
      td.appendChild(seeds);
    }
    if (row.status === "partly failed") td.appendChild(el("span", {"class": "seeds"}, "some seeds FAILED"));
    if (best) {
      td.className = "best";
      td.title = "best in this column (" + metric.better + " is better)";
      td.appendChild(el("span", {"class": "mark"}, " \u2605"));
    }
    return td;
  }

  function bestValue(kind, column, metric) {
    if (!metric.better) return NaN;
    var values = kind.cells.map(function (cells) { return valueOf(cells[column], metric); })
      .filter(function (v) { return Number.isFinite(v); });
    if (!values.length) return NaN;
    return metric.better === "higher" ? Math.max.apply(null, values) : Math.min.apply(null, values);
  }

  function compare(a, b, ascending) {  // missing numbers last whatever the direction
    var na = Number.isNaN(a), nb = Number.isNaN(b);
    if (na || nb) return na === nb ? 0 : (na ? 1 : -1);
    return ascending ? a - b : b - a;
  }

  function resultsTable(kind, state) {
    var metric = kind.metrics[state.metric];
    var table = el("table", {"class": "results", "data-kind": kind.name, "data-metric": metric.key});
    var head = el("tr");
    ["method"].concat(kind.columns).forEach(function (label, i) {
      var th = el("th", {"data-col": i - 1, scope: "col"}, label);
      if (kind.error_columns[i - 1]) th.title = "the suite reports this setting as error in %";
      if (state.column === i - 1) th.setAttribute("aria-sort", state.ascending ? "ascending" : "descending");
      th.addEventListener("click", function () {
        if (state.column === i - 1) state.ascending = !state.ascending;
        else { state.column = i - 1; state.ascending = i === 0 || metric.better === "lower"; }
        state.draw();
      });
      head.appendChild(th);
    });
    table.appendChild(el("thead")).appendChild(head);
    var order = kind.methods.map(function (_, i) { return i; });
    if (state.column >= 0) {
      order.sort(function (a, b) {
        return compare(valueOf(kind.cells[a][state.column], metric),
                       valueOf(kind.cells[b][state.column], metric), state.ascending) || a - b;
      });
    } else if (!state.ascending) order.reverse();
    var best = kind.columns.map(function (_, c) { return bestValue(kind, c, metric); });
    var body = el("tbody");
    order.forEach(function (m) {
      var tr = el("tr", {"data-method": kind.methods[m]});
      tr.appendChild(el("td", {}, kind.methods[m]));
      kind.cells[m].forEach(function (index, c) {
        tr.appendChild(resultCell(index, metric, valueOf(index, metric) === best[c]));
      });
      body.appendChild(tr);
    });
    kind.references.forEach(function (ref) {
      var tr = el("tr", {"class": "reference"});
      tr.appendChild(el("td", {}, ref.name + " (published)"));
      ref.error_percent.forEach(function (v) {
        tr.appendChild(el("td", {}, v === null ? "\u2013" : num(v).toFixed(1) + "% err"));
      });
      body.appendChild(tr);
    });
    table.appendChild(body);
    return table;
  }

  function kindSection(kind, many) {
    var box = el("div", {"class": "kind", id: "kind-" + kind.name});
    if (many) box.appendChild(el("h3", {}, kind.name));
    var start = kind.metrics.findIndex(function (m) { return m.key === wanted(); });
    var state = {metric: Math.max(start, 0), column: -1, ascending: true};
    var buttons = el("div", {"class": "metrics", role: "group", "aria-label": "metric shown"});
    var direction = el("p", {"class": "direction"});
    var holder = el("div", {"class": "scroll"});
    kind.metrics.forEach(function (metric, i) {
      var button = el("button", {type: "button", "data-metric": metric.key, title: metric.help}, metric.label);
      button.addEventListener("click", function () {
        state.metric = i;
        try { history.replaceState(null, "", "#metric=" + encodeURIComponent(metric.key)); } catch (e) { /* file: */ }
        state.draw();
      });
      buttons.appendChild(button);
    });
    state.draw = function () {
      var metric = kind.metrics[state.metric];
      Array.prototype.forEach.call(buttons.children, function (b, i) {
        b.setAttribute("aria-pressed", String(i === state.metric));
      });
      direction.textContent = metric.label + ": " + (metric.help || metric.key) +
        (metric.better ? "; " + metric.better + " is better, the best of a column marked \u2605." : ".") +
        " Click a column's head to sort by it.";
      holder.replaceChildren(resultsTable(kind, state));
    };
    box.appendChild(buttons);
    box.appendChild(direction);
    box.appendChild(holder);
    state.draw();
    return box;
  }

  function sortable(table) {  // any column, by data-value where a cell has one, else by text
    var heads = table.querySelectorAll("thead th");
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener("click", function () {
        var ascending = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        var body = table.tBodies[0];
        var trs = Array.prototype.slice.call(body.rows);
        trs.sort(function (a, b) {
          var ca = a.cells[col], cb = b.cells[col];
          if (ca.hasAttribute("data-value")) {
            return compare(num(ca.getAttribute("data-value")), num(cb.getAttribute("data-value")), ascending);
          }
          return (ascending ? 1 : -1) * ca.textContent.localeCompare(cb.textContent);
        });
        trs.forEach(function (tr) { body.appendChild(tr); });
      });
    });
  }

  function pairedTable(kind) {
    var pairs = data.table.paired.map(function (p, i) { return [p, i]; })
      .filter(function (pi) { return pi[0].task === kind.name; });
    if (!pairs.length) return el("p", {}, "No two methods share two or more test episodes of a setting.");
    var spec = kind.paired, unit = spec.scale === 100 ? " (%)" : "";
    var table = el("table", {"class": "paired", "data-kind": kind.name});
    var head = el("tr");
    ["setting", "a", "b", spec.key + " a - b" + unit, "95% CI", "episodes", "seeds"].forEach(function (t) {
      head.appendChild(el("th", {scope: "col"}, t));
    });
    table.appendChild(el("thead")).appendChild(head);
    var body = el("tbody");
    pairs.forEach(function (pi) {
      var p = pi[0], tr = el("tr", {"data-pair": pi[1]});
      ["setting", "a", "b"].forEach(function (k) { tr.appendChild(el("td", {"class": "text"}, p[k])); });
      var diff = num(p.difference) * spec.scale;
      tr.appendChild(el("td", {"data-key": "difference", "data-value": String(p.difference)},
                        (diff > 0 ? "+" : "") + fmt(diff, spec.digits)));
      tr.appendChild(el("td", {"data-key": "ci95", "data-value": String(p.ci95)},
                        fmt(num(p.ci95) * spec.scale, spec.digits) + (p.significant ? " \u2731" : "")));
      tr.appendChild(el("td", {"data-key": "episodes", "data-value": String(p.episodes)}, String(p.episodes)));
      tr.appendChild(el("td", {"data-key": "seeds", "data-value": String(p.seeds)}, String(p.seeds) + " (CI over " + p.unit + ")"));
      body.appendChild(tr);
    });
    table.appendChild(body);
    sortable(table);
    var box = el("div", {"class": "scroll"});
    box.appendChild(table);
    return box;
  }

  var tables = document.getElementById("tables"), paired = document.getElementById("paired-tables");
  if (!data.kinds.length) tables.appendChild(el("p", {}, "No results in this folder yet."));
  data.kinds.forEach(function (kind) {
    tables.appendChild(kindSection(kind, data.kinds.length > 1));
    if (data.kinds.length > 1) paired.appendChild(el("h3", {}, kind.name));
    paired.appendChild(pairedTable(kind));
  });
  document.body.setAttribute("data-rendered", "yes");
})();
