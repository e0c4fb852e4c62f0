// chronolog console: small progressive enhancements; every page works without them.
"use strict";

// The message browser: keep the UTC date-time field and the ms field in step.
function pad(n, w) { return String(n).padStart(w || 2, "0"); }
function utcInput(ms) {
  const d = new Date(ms);
  return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + "T" +
    pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds()) + "." +
    pad(d.getUTCMilliseconds(), 3);
}
function setupSeek() {
  const at = document.getElementById("at"), ms = document.getElementById("ms");
  const local = document.getElementById("local-time");
  if (!at || !ms) return;
  const showLocal = () => {
    const v = Number(ms.value);
    local.textContent = ms.value && !isNaN(v) ? "your time: " + new Date(v).toLocaleString() : "";
  };
  if (ms.value) at.value = utcInput(Number(ms.value));
  at.addEventListener("input", () => {
    const v = Date.parse(at.value + "Z");
    if (!isNaN(v)) ms.value = String(v);
    showLocal();
  });
  ms.addEventListener("input", () => {
    const v = Number(ms.value);
    if (ms.value && !isNaN(v)) at.value = utcInput(v);
    showLocal();
  });
  // The ms field wins on the server; send only it when it is filled.
  document.getElementById("seek").addEventListener("submit", () => { if (ms.value) at.disabled = true; });
  showLocal();
}

// Destructive forms ask once more.
function setupConfirm() {
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (e) => { if (!window.confirm(form.dataset.confirm)) e.preventDefault(); });
  }
}

// Topics page: messages in per second from the broker's own counter (/metrics), while open.
async function produced() {
  const r = await fetch("/metrics", { cache: "no-store" });
  const text = await r.text(), out = {};
  for (const m of text.matchAll(/^kafka_server_brokertopicmetrics_messagesin_total\{topic="([^"]*)"\} (\S+)$/gm)) {
    out[m[1]] = Number(m[2]);
  }
  return out;
}
function setupRates() {
  const rows = document.querySelectorAll("tr.topic");
  if (!rows.length) return;
  let last = null, lastAt = 0;
  const tick = async () => {
    try {
      const now = performance.now(), counts = await produced();
      if (last) {
        for (const row of rows) {
          const t = row.dataset.topic, dt = (now - lastAt) / 1000;
          const rate = ((counts[t] || 0) - (last[t] || 0)) / dt;
          row.querySelector(".rate").textContent = rate.toFixed(1);
        }
      }
      last = counts; lastAt = now;
    } catch (e) { /* the broker is restarting: try again next tick */ }
  };
  tick();
  setInterval(tick, 5000);
}

document.addEventListener("DOMContentLoaded", () => { setupSeek(); setupConfirm(); setupRates(); });
