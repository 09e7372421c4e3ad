// PocoLobby pages: forms go out as JSON from this page's origin; live parts refresh only
// while the page is visible; a local operator's #ticket= is posted back once.
(function () {
  "use strict";

  function fieldValue(el) {
    if (el.type === "checkbox") return el.checked;
    if (el.dataset.type === "bool") return el.value === "true";
    if (el.dataset.type === "int") return el.value === "" ? null : parseInt(el.value, 10);
    if (el.dataset.type === "lines") {
      return el.value.split("\n").map(function (s) { return s.trim(); }).filter(Boolean);
    }
    if (el.multiple) return Array.from(el.selectedOptions).map(function (o) { return o.value; });
    return el.value;
  }

  function formBody(form) {
    var body = {};
    form.querySelectorAll("[data-many]").forEach(function (set) { body[set.dataset.many] = []; });
    Array.from(form.elements).forEach(function (el) {
      if (!el.name || el.disabled || el.type === "submit") return;
      if (el.type === "checkbox" && el.closest("[data-many]")) {
        if (el.checked) body[el.name].push(el.value);
        return;
      }
      if (el.type === "radio") { if (el.checked) body[el.name] = el.value; return; }
      body[el.name] = fieldValue(el);
    });
    return body;
  }

  function say(form, text, failed) {
    var status = form.querySelector("[data-form-status]");
    if (!status) return;
    status.textContent = text;
    status.classList.toggle("error", !!failed);
  }

  async function postJSON(url, body) {
    var response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Accept": "application/json" },
      body: JSON.stringify(body),
    });
    var data = {};
    try { data = await response.json(); } catch (e) { data = {}; }
    return { ok: response.ok, data: data };
  }

  document.addEventListener("submit", async function (event) {
    var form = event.target;
    if (!form.matches("form[data-json]")) return;
    event.preventDefault();
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
    if (form.dataset.busy) return;  // a double tap while the first is under way
    var reply = form.hasAttribute("data-reply-form");
    form.dataset.busy = "1";
    say(form, reply ? "Sending…" : "Saving…", false);
    try {
      var result = await postJSON(form.getAttribute("action"), formBody(form));
      if (!result.ok) {
        var message = (result.data.error && result.data.error.message) || "That did not work.";
        say(form, message, true);
        return;
      }
      if (result.data.redirect) { window.location.assign(result.data.redirect); return; }
      if (form.dataset.reload !== undefined) {
        // Say what was saved across the reload, once.
        sessionStorage.setItem("pocolobby-saved", result.data.message || "Saved.");
        // The folded section the form sits in stays open across the reload.
        var open = [];
        for (var d = form.closest("details[id]"); d; d = d.parentElement.closest("details[id]")) {
          open.push(d.id);
        }
        sessionStorage.setItem("pocolobby-open", JSON.stringify(open));
        window.location.reload();
        return;
      }
      say(form, result.data.message || "Saved.", false);
      if (reply) {
        // The next message is a new one; a retry of this one (same key) was answered above.
        form.querySelector("[data-form-key]").value = newKey();
        form.querySelector("textarea").value = "";
        var important = form.querySelector("[name=important]");
        if (important) important.checked = false;
        // An answer to a question: its live part redraws now, showing it answered.
        var part = form.hasAttribute("data-refresh-part") && form.closest("[data-live]");
        if (part && window.htmx) {
          form.closest("details").open = false;
          window.htmx.ajax("GET", part.getAttribute("hx-get"), { target: part, swap: "innerHTML" });
        }
      }
    } catch (e) {
      say(form, reply ? "The broker did not answer; send again to retry safely (it is sent once)."
        : "The broker did not answer; nothing was changed.", true);
    } finally {
      delete form.dataset.busy;
    }
  });

  function newKey() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return String(Date.now()) + "-" + String(Math.random()).slice(2);
  }

  // Reopen what was open before a save's reload, and a folded section a link points at.
  function openFolds() {
    var ids = [];
    try { ids = JSON.parse(sessionStorage.getItem("pocolobby-open") || "[]"); } catch (e) { ids = []; }
    sessionStorage.removeItem("pocolobby-open");
    if (window.location.hash.length > 1) ids.push(decodeURIComponent(window.location.hash.slice(1)));
    ids.forEach(function (id) {
      var el = document.getElementById(id);
      if (el && el.tagName === "DETAILS") el.open = true;
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", openFolds);
  else openFolds();
  window.addEventListener("hashchange", openFolds);

  var saved = sessionStorage.getItem("pocolobby-saved");
  if (saved) {
    sessionStorage.removeItem("pocolobby-saved");
    document.addEventListener("DOMContentLoaded", function () {
      var out = document.querySelector("[data-saved]");
      if (out) { out.textContent = saved; out.hidden = false; }
    });
  }

  // Live parts refresh only while someone can see them.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var el = event.detail && event.detail.elt;
    if (!el || !el.hasAttribute("data-live")) return;
    // Hidden, or the owner is writing a reply in it: refreshing would throw the words away.
    if (document.hidden || el.querySelector("details[open]")) event.preventDefault();
  });

  // Times in the reader's own zone: relative ones ("5 min ago") and clock ones, re-read
  // after every live refresh and once a minute; the UTC text stays until the script runs.
  function ago(ms) {
    var s = Math.round(ms / 1000);
    var future = s < 0;
    s = Math.abs(s);
    var text;
    if (s < 45) text = s + " s";
    else if (s < 3600) text = Math.round(s / 60) + " min";
    else if (s < 86400) text = Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
    else text = Math.round(s / 86400) + " d";
    return future ? "in " + text : text + " ago";
  }

  function localTimes(root) {
    var now = Date.now();
    (root || document).querySelectorAll("time[datetime]").forEach(function (el) {
      var at = new Date(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      var clock = at.toLocaleString([], { weekday: "short", hour: "2-digit", minute: "2-digit" });
      if (el.hasAttribute("data-relative")) {
        var prefix = el.textContent.indexOf("seen ") === 0 ? "seen " : "";
        el.textContent = prefix + ago(now - at.getTime());
        el.title = at.toLocaleString();
      } else if (el.dataset.local === "time") {
        el.textContent = at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
        el.title = at.toLocaleString();
      } else if (el.dataset.local !== undefined) {
        el.textContent = clock;
        el.title = at.toLocaleString();
      }
    });
  }

  var updatedAt = Date.now();
  function showUpdated() {
    var out = document.querySelector("[data-updated]");
    if (out) out.textContent = ago(Date.now() - updatedAt);
  }
  document.addEventListener("htmx:afterSwap", function (event) {
    localTimes(event.detail.target);
    updatedAt = Date.now();
    showUpdated();
  });
  document.addEventListener("DOMContentLoaded", function () { localTimes(document); });
  if (document.readyState !== "loading") localTimes(document);
  setInterval(function () { showUpdated(); }, 5000);
  setInterval(function () { localTimes(document); }, 60000);

  // A local operator's link: the ticket is in the fragment, which never reaches a server.
  var hash = window.location.hash;
  if (hash.indexOf("#ticket=") === 0) {
    var ticket = decodeURIComponent(hash.slice(8));
    history.replaceState(null, "", window.location.pathname);
    postJSON("/ticket", { ticket: ticket }).then(function (result) {
      if (result.ok) { window.location.assign(result.data.redirect || "/"); return; }
      var out = document.querySelector("[data-ticket-status]");
      if (out) {
        out.textContent = (result.data.error && result.data.error.message) ||
          "That link did not work.";
      }
    });
  }
})();
