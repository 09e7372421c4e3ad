// PocoLobby's service worker for one lobby's pages: shows the broker's pushes and opens the
// dashboard place a push names. It caches nothing and fetches nothing.
"use strict";

self.addEventListener("install", function () { self.skipWaiting(); });
self.addEventListener("activate", function (event) { event.waitUntil(self.clients.claim()); });

self.addEventListener("push", function (event) {
  var data = {};
  try { data = event.data ? event.data.json() : {}; } catch (e) { data = {}; }
  var title = typeof data.title === "string" ? data.title : "PocoLobby: something waits on you";
  event.waitUntil(self.registration.showNotification(title, {
    body: typeof data.body === "string" ? data.body : "",
    tag: typeof data.tag === "string" ? data.tag : "pocolobby",
    renotify: true,
    data: { place: typeof data.place === "string" ? data.place : "" },
  }));
});

self.addEventListener("notificationclick", function (event) {
  event.notification.close();
  var scope = self.registration.scope;
  var target = new URL((event.notification.data && event.notification.data.place) || "", scope);
  if (target.origin !== self.location.origin || !target.href.startsWith(scope)) target = new URL(scope);
  event.waitUntil(self.clients.matchAll({ type: "window", includeUncontrolled: true })
    .then(function (open) {
      for (var i = 0; i < open.length; i++) {
        var client = open[i];
        if (client.url.startsWith(scope) && "focus" in client) {
          return client.focus().then(function (c) { return c.navigate ? c.navigate(target.href) : c; });
        }
      }
      return self.clients.openWindow(target.href);
    }));
});
