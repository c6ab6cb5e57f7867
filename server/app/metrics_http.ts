import { Router, type Request, type RequestHandler, type Response } from 'express';
import type { MetricsRecorder, MetricsWindow, Registry } from '../../metrics/index.js';
import { sendError } from './http.js';

/// Windows returned by `GET /metrics/windows` when `last` is not given: five minutes.
const defaultWindows = 30;

/// Builds the metrics routes, to be mounted by the server (`app.use(metricsRouter(...))`):
/// - `GET /metrics`: `registry` in Prometheus text format, with `registry.contentType`;
/// - `GET /metrics/windows?last=N`: `{windows: MetricsWindow[]}`, the last N closed windows
///   oldest first (N from 1 to the recorder's `windowsKept`, 360 by default; 30 when absent).
///   An invalid N gets 400 `{code: 'bad-request', message}`;
/// - `GET /dashboard` (`/dashboard/` redirects there): an HTML page that polls `metrics/windows` and draws line charts of
///   latency (processing and hold apart), throughput, editors and event-loop delay on
///   canvases, with its script and style at `GET /dashboard/app.js` and `GET /dashboard/app.css` (served from this router, nothing
///   from elsewhere).
/// Errors from the registry reach express's error handling as rejected promises (express 5).
export function metricsRouter(
  recorder: MetricsRecorder,
  registry: Registry,
  access: {
    /// Checks the data routes' requests (a bearer token); the dashboard's page and its script
    /// carry no data and stay public, the script sending the token it finds in the fragment.
    guard?: RequestHandler | null;
    /// Rewrites each window before it leaves (document ids replaced by labels).
    redact?: ((window: MetricsWindow) => MetricsWindow) | null;
  } = {},
): Router {
  const router = Router();
  const guards = access.guard ? [access.guard] : [];
  const redact = access.redact ?? null;

  router.get('/metrics', ...guards, async (_req: Request, res: Response) => {
    const text = await registry.metrics();
    res.set('Cache-Control', 'no-store').type(registry.contentType).send(text);
  });

  router.get('/metrics/windows', ...guards, (req: Request, res: Response) => {
    const max = recorder.config.windowsKept;
    const raw = req.query.last;
    let last = defaultWindows;
    if (raw !== undefined) {
      // Digits only: Number('1e2'), Number(' 5') and Number('0x10') would all be accepted.
      last = typeof raw === 'string' && /^[0-9]{1,6}$/.test(raw) ? Number(raw) : NaN;
      if (!(last >= 1 && last <= max)) {
        sendError(res, 'bad-request', `last must be an integer from 1 to ${max}`);
        return;
      }
    }
    const windows = recorder.windows(last);
    res.set('Cache-Control', 'no-store').json({ windows: redact ? windows.map(redact) : windows });
  });

  router.get('/dashboard', (req: Request, res: Response) => {
    // Express's routing matches `/dashboard/` here too, where the page's relative addresses
    // would resolve under `/dashboard/dashboard/` and nothing would load. Redirected relative
    // to where it was asked for, so that a prefix a proxy added is kept, and with its query.
    if (req.path.endsWith('/')) {
      const query = req.originalUrl.indexOf('?');
      res.redirect(301, `../dashboard${query === -1 ? '' : req.originalUrl.slice(query)}`);
      return;
    }
    res.set('Cache-Control', 'no-store').type('html').send(dashboardHtml);
  });
  // Revalidated (express adds an ETag), so a new server version is picked up at once.
  router.get('/dashboard/app.js', (_req: Request, res: Response) => {
    res.set('Cache-Control', 'no-cache').type('js').send(dashboardScript);
  });
  router.get('/dashboard/app.css', (_req: Request, res: Response) => {
    res.set('Cache-Control', 'no-cache').type('css').send(dashboardStyle);
  });

  return router;
}

// The page is plain HTML with a script that draws on canvases by hand: the server has no
// internet access, so no CDN, and a charting package would be a dependency for four charts.
// Script and style are separate answers rather than inline, so that the page runs under a
// Content-Security-Policy without 'unsafe-inline'; they are strings here rather than files
// so that the dashboard works without the web bundle being built. The addresses are relative,
// as the script's fetch is, so the dashboard also works behind a proxy that adds a prefix.
const dashboardHtml = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Scriptorium metrics</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="dashboard/app.css">
<script src="dashboard/app.js" defer></script>
</head>
<body>
<h1>Scriptorium metrics</h1>
<div id="status">Loading…
  <label>Range
    <select id="range">
      <option value="30">5 min</option>
      <option value="90" selected>15 min</option>
      <option value="360">1 hour</option>
    </select>
  </label>
</div>
<div class="grid">
  <figure><figcaption>Steps latency (ms)</figcaption><canvas id="chart-latency"></canvas></figure>
  <figure><figcaption>Throughput (per second)</figcaption><canvas id="chart-rps"></canvas></figure>
  <figure><figcaption>Editors and documents</figcaption><canvas id="chart-editors"></canvas></figure>
  <figure><figcaption>Event-loop delay p99 (ms)</figcaption><canvas id="chart-eventloop"></canvas></figure>
</div>
</body>
</html>
`;

const dashboardStyle = `body { font: 14px system-ui, sans-serif; margin: 16px; background: #fafafa; color: #222; }
h1 { font-size: 18px; margin: 0 0 8px; }
#status { margin-bottom: 12px; color: #555; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(460px, 1fr)); gap: 12px; }
figure { margin: 0; background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 8px; }
figcaption { font-weight: 600; margin-bottom: 4px; }
canvas { width: 100%; height: 220px; display: block; }
`;

// The script avoids template literals so it can sit inside this one.
const dashboardScript = `"use strict";
var charts = [
  { id: "chart-latency", series: [
    ["p50", "latencyP50Ms", "#2b8a3e"], ["p90", "latencyP90Ms", "#e67700"], ["p99", "latencyP99Ms", "#c92a2a"],
    ["processing p99", "processingP99Ms", "#5c940d"], ["hold p99", "holdP99Ms", "#868e96"]] },
  { id: "chart-rps", series: [
    ["accepted batches", "batchesAcceptedPerSec", "#1c7ed6"], ["received batches", "batchesReceivedPerSec", "#74c0fc"],
    ["steps", "stepsAcceptedPerSec", "#7048e8"]] },
  { id: "chart-editors", series: [["editors", "editors", "#0b7285"], ["documents", "documents", "#f08c00"]] },
  { id: "chart-eventloop", series: [["delay p99", "eventLoopDelayP99Ms", "#862e9c"]] }
];

function clock(ms) {
  var d = new Date(ms);
  function two(n) { return (n < 10 ? "0" : "") + n; }
  return two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds());
}

function label(v) {
  return Math.abs(v) >= 100 ? v.toFixed(0) : String(parseFloat(v.toPrecision(3)));
}

// Rounds the top of the y axis up to 1, 2, 2.5 or 5 times a power of ten, so the four
// gridlines fall on readable values.
function niceCeiling(v) {
  if (!(v > 0)) return 1;
  var power = Math.pow(10, Math.floor(Math.log10(v)));
  var steps = [1, 2, 2.5, 5, 10];
  for (var i = 0; i < steps.length; i++) if (steps[i] * power >= v) return steps[i] * power;
  return 10 * power;
}

// Draws one line chart: x is each window's end time, y starts at 0; null values leave gaps.
function draw(chart, windows) {
  var canvas = document.getElementById(chart.id);
  var ratio = window.devicePixelRatio || 1;
  var width = canvas.clientWidth, height = canvas.clientHeight;
  canvas.width = width * ratio; canvas.height = height * ratio;
  var g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, width, height);
  var left = 48, right = width - 8, top = 20, bottom = height - 22;
  var max = 0;
  chart.series.forEach(function (s) {
    windows.forEach(function (w) { var v = w[s[1]]; if (v !== null && v > max) max = v; });
  });
  max = niceCeiling(max);
  var t0 = windows.length ? windows[0].endMs : 0;
  var t1 = windows.length ? windows[windows.length - 1].endMs : 1;
  if (t1 === t0) t0 = t1 - 10000;
  function x(t) { return left + (right - left) * (t - t0) / (t1 - t0); }
  function y(v) { return bottom - (bottom - top) * v / max; }
  g.font = "11px system-ui, sans-serif";
  g.strokeStyle = "#e5e5e5"; g.fillStyle = "#666"; g.lineWidth = 1;
  for (var i = 0; i <= 4; i++) {
    var v = max * i / 4, yy = Math.round(y(v)) + 0.5;
    g.beginPath(); g.moveTo(left, yy); g.lineTo(right, yy); g.stroke();
    g.textAlign = "right"; g.fillText(label(v), left - 4, yy + 4);
  }
  g.textAlign = "left"; g.fillText(windows.length ? clock(t0) : "", left, height - 6);
  g.textAlign = "right"; g.fillText(windows.length ? clock(t1) : "no data yet", right, height - 6);
  var legendX = left;
  chart.series.forEach(function (s) {
    g.strokeStyle = s[2]; g.lineWidth = 2; g.beginPath();
    var drawing = false;
    windows.forEach(function (w) {
      var v = w[s[1]];
      if (v === null || v === undefined) { drawing = false; return; }
      if (drawing) g.lineTo(x(w.endMs), y(v)); else g.moveTo(x(w.endMs), y(v));
      drawing = true;
    });
    g.stroke();
    g.fillStyle = s[2]; g.fillRect(legendX, 6, 10, 3);
    g.fillStyle = "#333"; g.textAlign = "left"; g.fillText(s[0], legendX + 14, 11);
    legendX += 22 + g.measureText(s[0]).width;
  });
}

var latest = [];
function render() { charts.forEach(function (c) { draw(c, latest); }); }

// The metrics token, when the server needs one, from the address's fragment
// (/dashboard#token=...): never sent to the server in the URL, so never in its logs. Read by
// hand rather than with URLSearchParams, which takes '+' for a space: base64 tokens
// (openssl rand -base64) have '+' in them. Percent-encoded tokens are decoded.
function fragmentToken() {
  var parts = location.hash.slice(1).split("&");
  for (var i = 0; i < parts.length; i++) {
    var at = parts[i].indexOf("=");
    if (at === -1 || parts[i].slice(0, at) !== "token") continue;
    var value = parts[i].slice(at + 1);
    try { return decodeURIComponent(value); } catch (e) { return value; }
  }
  return null;
}
var token = fragmentToken();
var headers = token ? { Authorization: "Bearer " + token } : {};

function poll() {
  var last = document.getElementById("range").value;
  fetch("metrics/windows?last=" + last, { cache: "no-store", headers: headers })
    .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
    .then(function (body) {
      latest = body.windows;
      var w = latest[latest.length - 1];
      document.getElementById("status").firstChild.textContent = w
        ? "Window ending " + clock(w.endMs) + ": " + w.editors + " editors, " + w.documents +
          " documents, " + w.batchesAcceptedPerSec + " accepted/s, p99 " + w.latencyP99Ms + " ms (" +
          w.processingP99Ms + " processing, " + w.holdP99Ms + " hold). "
        : "No closed window yet (windows close every 10 s). ";
      render();
    })
    .catch(function (e) {
      document.getElementById("status").firstChild.textContent = "Polling failed: " + e.message + ". ";
    });
}

document.getElementById("range").addEventListener("change", poll);
window.addEventListener("resize", render);
poll();
setInterval(poll, 5000);
`;
