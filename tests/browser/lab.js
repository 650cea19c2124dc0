// In-page driver for the browser tests (evaluated once per page by conftest.py).
//
// It reads JupyterLab's own models through `window.jupyterapp` (the server runs with
// LabApp.expose_app_in_browser) and the rendered DOM. Everything a test *does* to a
// widget goes through Playwright's real input events; this file only opens the
// notebook, starts "Run All Cells", and reads state.
(() => {
  const WIDGET_MIME = "application/vnd.jupyter.widget-view+json";
  const SVG_MIME = "image/svg+xml";
  const STDERR_MIME = "application/vnd.jupyter.stderr";
  const PROBLEM_TEXT = /Traceback \(most recent call last\)|^\s*\w*(Error|Exception|Warning)\b/m;

  let panel = null;

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  async function until(what, condition, timeoutMs) {
    const start = Date.now();
    while (!condition()) {
      if (Date.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      await sleep(50);
    }
  }

  // The text of `el` as a reader sees it (innerText). In JupyterLab's default windowing mode,
  // "contentVisibility" (the test server keeps it, as a learner has it), the browser skips
  // rendering cells out of view, and the innerText of a skipped cell is empty: the cells
  // in or around `el` are rendered for the moment of the reading.
  function shownText(el) {
    const cell = el.closest(".jp-Notebook-cell");
    const cells = cell ? [cell] : Array.from(el.querySelectorAll(".jp-Notebook-cell"));
    const before = cells.map((c) => c.style.contentVisibility);
    cells.forEach((c) => (c.style.contentVisibility = "visible"));
    try {
      return el.innerText;
    } finally {
      cells.forEach((c, i) => (c.style.contentVisibility = before[i]));
    }
  }

  // Whitespace runs count as one space; d3's minus sign (slider readouts) as "-".
  const norm = (text) => String(text ?? "").replace(/\u2212/g, "-").replace(/\s+/g, " ").trim();
  const codeCells = () => panel.content.widgets.filter((cell) => cell.model.type === "code");
  const cellById = (id) => panel.content.widgets.find((cell) => cell.model.id === id) || null;
  const kernel = () => (panel && panel.sessionContext.session ? panel.sessionContext.session.kernel : null);

  // The text a learner reads in an output area. SVG images (graphs) count by the
  // text of their labels, other images by their type only: the browser compares text.
  function svgText(out) {
    const img = out.querySelector("img");
    let root = out;
    if (img && img.src.startsWith("data:image/svg+xml")) {
      const comma = img.src.indexOf(",");
      const head = img.src.slice(0, comma);
      const body = img.src.slice(comma + 1);
      const source = head.endsWith(";base64") ? atob(body) : decodeURIComponent(body);
      root = new DOMParser().parseFromString(source, "image/svg+xml");
    }
    return "[graph] " + Array.from(root.querySelectorAll("text"), (t) => t.textContent).join(" ");
  }

  // The outputs of an output area (a cell's, or the Output widget inside an .al-output),
  // without those of areas nested inside them.
  function outputsOf(area) {
    const oa = area && (area.matches(".jp-OutputArea") ? area : area.querySelector(".jp-OutputArea"));
    return oa ? Array.from(oa.querySelectorAll(":scope > .jp-OutputArea-child > .jp-OutputArea-output")) : [];
  }

  function outputText(area) {
    const parts = [];
    for (const out of outputsOf(area)) {
      const mime = out.dataset.mimeType || "";
      if (mime === SVG_MIME || (!mime && out.querySelector("svg text"))) parts.push(svgText(out));
      else if (mime.startsWith("image/")) parts.push(`[${mime}]`);
      else if (out.querySelector(".al-live")) parts.push("[widget]");
      else parts.push(shownText(out));
    }
    return norm(parts.join("\n"));
  }

  function imageRendered(out) {
    const img = out.querySelector("img");
    if (img) return img.complete && img.naturalWidth > 0;
    return !!out.querySelector("svg");
  }

  function cellSummary(cell) {
    const outputs = [];
    const model = cell.model.outputs;
    for (let i = 0; i < model.length; i++) {
      const item = model.get(i);
      const json = item.toJSON();
      outputs.push({
        type: item.type,
        mimes: Object.keys(json.data || {}),
        ename: json.ename || null,
        evalue: json.evalue || null,
      });
    }
    const node = cell.node;
    const area = node.querySelector(".jp-Cell-outputArea");
    const shown = outputsOf(area);
    // Model output i is drawn as the area's i-th child (JupyterLab trims only past 50 outputs).
    outputs.forEach((output, i) => {
      const out = shown[i];
      output.shownAs = out ? out.dataset.mimeType || (out.querySelector(".jupyter-widgets") ? "widget" : "") : null;
      output.imageLoaded = out ? imageRendered(out) : false;
      output.widgetError = out ? /Error displaying widget/.test(shownText(out)) : false;
    });
    return {
      id: cell.model.id,
      index: panel.content.widgets.indexOf(cell),
      source: cell.model.sharedModel.getSource(),
      tags: cell.model.getMetadata("tags") || [],
      lab: cell.model.getMetadata("autograd_lab") || null,
      executionCount: cell.model.executionCount,
      outputs,
      widgetError: /Error displaying widget/.test(shownText(node)),
      livePanels: node.querySelectorAll(".al-live").length,
      text: outputText(area),
    };
  }

  window.alTest = {
    async ready() {
      await window.jupyterapp.started;
      await window.jupyterapp.restored;
    },

    // Close every document without saving (the test before ran its notebook: it is dirty) and forget it.
    closeAll() {
      for (const widget of Array.from(window.jupyterapp.shell.widgets("main"))) {
        if (widget.context) widget.context.model.dirty = false;
        widget.dispose();
      }
      panel = null;
      this.run = null;
    },

    async open(path, timeoutMs) {
      const app = window.jupyterapp;
      await this.ready();
      panel = await app.commands.execute("docmanager:open", { path, factory: "Notebook" });
      await panel.context.ready;
      await panel.sessionContext.ready;
      app.shell.activateById(panel.id);
      await until("the kernel to start", () => kernel() && kernel().status === "idle", timeoutMs);
      for (const cell of panel.content.widgets) cell.node.dataset.alCellId = cell.model.id;
      return panel.content.widgets.length;
    },

    // "Run > Run All Cells", in the kernel the notebook's session started (as a learner who opens a
    // notebook and runs it; a restart would start a second kernel). The command resolves when the last cell has
    // run; `run` records that, and `finished()` waits for it and for the page to settle.
    startRun() {
      const app = window.jupyterapp;
      app.shell.activateById(panel.id);
      const run = (this.run = { done: false, result: null, error: null, statuses: [] });
      const record = (_, status) => run.statuses.push(status);
      panel.sessionContext.statusChanged.connect(record);
      app.commands.execute("notebook:run-all-cells", {}).then(
        async (result) => {
          run.result = result === undefined ? null : result;
          // The command resolves early when a cell raises (even one tagged raises-exception) while
          // the kernel still runs the cells queued after it. The kernel answers requests in order,
          // so once a silent empty request sent now is answered, every cell before it is done.
          const k = kernel();
          if (k) {
            try {
              await k.requestExecute({ code: "", silent: true, store_history: false, stop_on_error: false }).done;
            } catch (error) {
              run.error = `waiting for the queued cells: ${error}`;
            }
          }
          run.done = true;
        },
        (error) => Object.assign(run, { done: true, error: String(error) })
      );
    },

    finished() {
      return (!!this.run && this.run.done && this.settled()) || !!this.dialog();
    },

    // The text of a modal dialog, if one is open (none is expected: it would block Run All).
    dialog() {
      const d = document.querySelector(".jp-Dialog");
      return d ? norm(shownText(d)) : null;
    },

    // True once the kernel is idle, no cell is queued or running, every widget view
    // has been drawn and every image has loaded.
    settled() {
      const k = kernel();
      if (!k || k.status !== "idle") return false;
      for (const cell of codeCells()) {
        if (cell.model.executionState === "running") return false;
        const prompt = cell.node.querySelector(".jp-InputPrompt");
        if (prompt && prompt.textContent.includes("*")) return false;
        const model = cell.model.outputs;
        for (let i = 0; i < model.length; i++) {
          if (WIDGET_MIME in (model.get(i).data || {})) {
            // a widget view is drawn (or has failed) once its DOM holds widgets or the error text
            const area = cell.node.querySelector(".jp-Cell-outputArea");
            if (!area || !(area.querySelector(".jupyter-widgets") || /Error displaying widget/.test(shownText(area)))) return false;
          }
        }
        for (const img of cell.node.querySelectorAll(".jp-OutputArea-output img")) if (!img.complete) return false;
      }
      return true;
    },

    kernelStatus() {
      const k = kernel();
      return k ? k.status : "no kernel";
    },

    cells() {
      return codeCells().map(cellSummary);
    },

    shownText(el) {
      return shownText(el);
    },

    pageHasWidgetError() {
      return /Error displaying widget/.test(shownText(panel.content.node));
    },

    outputText(cellId) {
      const cell = cellById(cellId);
      if (!cell) return null;
      return outputText(cell.node.querySelector(".jp-Cell-outputArea"));
    },

    // The text of a widget cell's output areas (class al-output), and any error shown there.
    widgetState(cellId) {
      const cell = cellById(cellId);
      if (!cell) return null;
      const areas = Array.from(cell.node.querySelectorAll(".al-output"));
      const problems = [];
      for (const area of areas) {
        for (const out of area.querySelectorAll(`.jp-OutputArea-output[data-mime-type="${STDERR_MIME}"]`)) {
          if (PROBLEM_TEXT.test(shownText(out))) problems.push(norm(shownText(out)).slice(0, 2000));
        }
      }
      return {
        panels: cell.node.querySelectorAll(".al-live").length,
        text: norm(areas.map(outputText).join("\n")),
        problems,
        widgetError: /Error displaying widget/.test(shownText(cell.node)),
      };
    },

    widgetTextIs(cellId, expected) {
      const state = this.widgetState(cellId);
      return !!state && (state.text === expected || state.problems.length > 0);
    },

    widgetTextIsNot(cellId, previous) {
      const state = this.widgetState(cellId);
      return !!state && (state.text !== previous || state.problems.length > 0);
    },

    // Controls of a widget cell: name (the description), kind and the value shown.
    controls(cellId) {
      const cell = cellById(cellId);
      if (!cell) return [];
      return Array.from(cell.node.querySelectorAll(".al-control")).map((el, index) => {
        const cls = el.classList;
        let kind = "other";
        if (cls.contains("widget-slider")) kind = "slider";
        else if (cls.contains("widget-checkbox")) kind = "checkbox";
        else if (cls.contains("widget-dropdown")) kind = "dropdown";
        else if (cls.contains("widget-toggle-buttons")) kind = "toggle-buttons";
        else if (cls.contains("widget-radio")) kind = "radio";
        else if (cls.contains("widget-toggle-button")) kind = "toggle";
        else if (cls.contains("widget-button") || el.tagName === "BUTTON") kind = "button";
        else if (el.querySelector("input[type=text], input[type=number], textarea")) kind = "text";
        const labels = [".widget-label", ".widget-label-basic span", ".widget-label-basic"].map((sel) => {
          const label = el.querySelector(sel);
          return label ? norm(label.textContent.replace(/\u200b/g, "")) : "";
        });
        let name = labels.find((text) => text) || "";
        if (!name && (kind === "button" || kind === "toggle")) name = (el.getAttribute("title") || el.textContent).trim();
        let value = null;
        if (kind === "slider") {
          const readout = el.querySelector(".widget-readout");
          const handle = el.querySelector(".noUi-handle");
          const attr = (name) => (handle && handle.hasAttribute(name) ? parseFloat(handle.getAttribute(name)) : null);
          return {
            index, name, kind,
            value: readout ? norm(readout.textContent) : null,
            number: attr("aria-valuenow"), min: attr("aria-valuemin"), max: attr("aria-valuemax"),
            editable: !!readout && readout.isContentEditable && readout.getClientRects().length > 0, // shown
          };
        } else if (kind === "checkbox") value = el.querySelector("input[type=checkbox]").checked;
        else if (kind === "dropdown") {
          const select = el.querySelector("select");
          value = select.selectedIndex >= 0 ? select.options[select.selectedIndex].textContent.trim() : null;
          return { index, name, kind, value, options: Array.from(select.options, (o) => o.textContent.trim()) };
        } else if (kind === "toggle-buttons") {
          const on = el.querySelector("button.mod-active");
          value = on ? on.textContent.trim() : null;
          return { index, name, kind, value, options: Array.from(el.querySelectorAll("button"), (b) => b.textContent.trim()) };
        } else if (kind === "radio") {
          const on = el.querySelector("input:checked");
          value = on ? on.parentElement.textContent.trim() : null;
          return { index, name, kind, value, options: Array.from(el.querySelectorAll("label"), (l) => l.textContent.trim()) };
        } else if (kind === "toggle") value = cls.contains("mod-active");
        else if (kind === "text") value = el.querySelector("input, textarea").value;
        return { index, name, kind, value };
      });
    },

    // Whether control `index` of a widget cell shows `expected` (a value from the cell's `set`).
    controlShows(cellId, index, expected) {
      const c = this.controls(cellId)[index];
      if (!c) return false;
      if (c.kind === "button") return true;
      if (c.kind === "checkbox" || c.kind === "toggle") return c.value === !!expected;
      if (c.kind === "slider" && typeof expected === "number") {
        // The readout, when there is one, shows the value as the slider formats it; the handle's
        // aria-valuenow is rounded (to one decimal for a float slider), so it is the fallback.
        const shown = c.value !== null && c.value !== "" ? Number(c.value) : NaN;
        const number = Number.isFinite(shown) ? shown : c.number;
        if (number !== null) return Math.abs(number - expected) <= 1e-6 * Math.max(1, Math.abs(expected));
      }
      return norm(c.value) === norm(expected);
    },

    // One cell as cells() describes it (its source as the notebook model holds it now, its outputs).
    cell(cellId) {
      const cell = cellById(cellId);
      return cell ? cellSummary(cell) : null;
    },

    // True once the kernel is idle and the cell has run since `count` (its execution count differs).
    ranAgain(cellId, count) {
      const cell = cellById(cellId);
      const k = kernel();
      return !!cell && !!k && k.status === "idle" && cell.model.executionCount !== count;
    },

    scrollToCell(cellId) {
      const cell = cellById(cellId);
      if (cell) cell.node.scrollIntoView({ block: "center" });
    },

    sessionId() {
      return panel && panel.sessionContext.session ? panel.sessionContext.session.id : null;
    },
  };
})();
