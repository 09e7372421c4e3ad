// Notifications on this device: register the lobby's service worker, subscribe with the
// broker's public key, and tell the broker (or stop, and tell it to forget this device).
(function () {
  "use strict";

  function keyBytes(base64url) {
    var padded = base64url.replace(/-/g, "+").replace(/_/g, "/");
    padded += "===".slice((padded.length + 3) % 4);
    var raw = atob(padded);
    var bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return bytes;
  }

  async function send(url, method, body) {
    var response = await fetch(url, {
      method: method,
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Accept": "application/json" },
      body: JSON.stringify(body),
    });
    var data = {};
    try { data = await response.json(); } catch (e) { data = {}; }
    if (!response.ok) throw new Error((data.error && data.error.message) || "The broker refused.");
    return data;
  }

  function setUp(card) {
    var base = card.dataset.base;
    var scope = base + "/";
    var state = card.querySelector("[data-push-state]");
    var on = card.querySelector("[data-push-on]");
    var off = card.querySelector("[data-push-off]");

    function show(text, subscribed) {
      state.textContent = text;
      on.hidden = subscribed;
      off.hidden = !subscribed;
    }

    if (!("serviceWorker" in navigator) || !("PushManager" in window) || !window.Notification) {
      state.textContent = "This browser cannot receive pushes (on an iPhone, add the page to the home screen first).";
      return;
    }

    async function registration() {
      return navigator.serviceWorker.register(base + "/push/service-worker.js", { scope: scope });
    }

    async function current() {
      var reg = await navigator.serviceWorker.getRegistration(scope);
      return reg ? reg.pushManager.getSubscription() : null;
    }

    current().then(function (sub) {
      if (sub) show("Notifications are on for this device.", true);
      else if (Notification.permission === "denied") show("Notifications are blocked for this site in the browser's settings.", false);
      else show("Notifications are off for this device.", false);
    }).catch(function () { show("Notifications are off for this device.", false); });

    on.addEventListener("click", async function () {
      on.disabled = true;
      try {
        var permission = await Notification.requestPermission();
        if (permission !== "granted") { show("The browser did not allow notifications.", false); return; }
        var reg = await registration();
        await navigator.serviceWorker.ready;
        var key = (await (await fetch(base + "/push/key", { credentials: "same-origin" })).json()).public_key;
        var sub = await reg.pushManager.getSubscription();
        if (!sub) sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(key) });
        var data = await send(base + "/push/subscriptions", "POST", sub.toJSON());
        show(data.message || "Notifications are on for this device.", true);
      } catch (e) {
        show("Could not turn notifications on: " + e.message, false);
      } finally {
        on.disabled = false;
      }
    });

    off.addEventListener("click", async function () {
      off.disabled = true;
      try {
        var sub = await current();
        if (sub) {
          await send(base + "/push/subscriptions", "DELETE", { endpoint: sub.endpoint });
          await sub.unsubscribe();
        }
        show("Notifications are off for this device.", false);
      } catch (e) {
        show("Could not turn notifications off: " + e.message, true);
      } finally {
        off.disabled = false;
      }
    });

    var zone = card.querySelector("[data-time-zone][data-guess]");
    if (zone && window.Intl) zone.value = Intl.DateTimeFormat().resolvedOptions().timeZone || zone.value;
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-push]").forEach(setUp);
  });
})();
