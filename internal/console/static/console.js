// The pending list follows the cluster: the server sends the list, rendered, after
// every change to an approval (Server-Sent Events), and it replaces the one shown.
(function () {
  var list = document.getElementById("pending");
  if (!list) return;
  var token = document.body.dataset.token;
  var events = new EventSource("/events?token=" + encodeURIComponent(token));
  events.addEventListener("pending", function (e) {
    list.innerHTML = e.data;
  });
})();
