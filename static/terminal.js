// The web terminal: xterm.js drawing a pseudo-terminal in the workspace, carried by the agent tunnel's WebSocket
// (agent/README.md "Tunnels"): binary frames are the terminal's bytes both ways, text frames are control messages.
// The session's id lives in the page's address (?session=<uuid>): the agent keeps the session 5 minutes after its
// last connection, so a reload, a reopened tab or the same address in another tab reattaches and replays it.
(function () {
  "use strict";
  const box = document.getElementById("terminal");
  if (!box || typeof Terminal === "undefined") return;
  const state = document.getElementById("terminal-state");
  const restart = document.getElementById("terminal-restart");
  const uuid4 = () => {  // crypto.randomUUID needs a secure context; plain-HTTP deployments have none
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  };
  const address = new URL(location.href);
  let session = address.searchParams.get("session") || "";
  if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(session)) {
    session = uuid4();
    address.searchParams.set("session", session);
    history.replaceState(null, "", address);
  }
  restart.addEventListener("click", () => {
    if (state.textContent === "exited") address.searchParams.delete("session");  // the old one is gone
    location.assign(address);
  });
  const show = (text, colour) => {
    state.textContent = text;
    state.className = "badge " + colour;
  };

  const term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000, fontFamily: "ui-monospace, Menlo, Consolas, monospace" });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();

  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const query = new URLSearchParams({ service: "pty", rows: term.rows, cols: term.cols, reconnect: session });
  const socket = new WebSocket(`${scheme}//${location.host}${box.dataset.socket}?${query}`);
  socket.binaryType = "arraybuffer";
  const encoder = new TextEncoder();
  const send = (data) => { if (socket.readyState === WebSocket.OPEN) socket.send(data); };

  socket.onopen = () => { show("connected", "badge-ok"); term.focus(); };
  socket.onmessage = (event) => {
    if (typeof event.data !== "string") {
      term.write(new Uint8Array(event.data));
      return;
    }
    const message = JSON.parse(event.data);
    if (message.type === "exit") {
      term.write(`\r\n[the shell exited with status ${message.code}]\r\n`);
      show("exited", "");
      restart.textContent = "New session";
    }
  };
  socket.onclose = (event) => {
    restart.hidden = false;
    // Codes from 4000 carry the server's reason (agent not connected, dial failed, workspace stopped).
    const reason = event.code >= 4000 && event.reason ? event.reason : "disconnected";
    if (state.textContent !== "exited") show(reason, "badge-err");
    if (event.code >= 4000 && event.reason) term.write(`\r\n${event.reason}\r\n`);
  };
  term.onData((data) => send(encoder.encode(data)));
  term.onBinary((data) => send(Uint8Array.from(data, (c) => c.charCodeAt(0))));
  term.onResize(({ rows, cols }) => send(JSON.stringify({ type: "resize", rows: rows, cols: cols })));
  window.addEventListener("resize", () => fit.fit());
})();
