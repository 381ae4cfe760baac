// The web terminal: xterm.js drawing a pseudo-terminal in the workspace, carried by the agent tunnel's WebSocket
// (agent/README.md "Tunnels"): binary frames are the terminal's bytes both ways, text frames are control messages.
(function () {
  "use strict";
  const box = document.getElementById("terminal");
  if (!box || typeof Terminal === "undefined") return;
  const state = document.getElementById("terminal-state");
  const restart = document.getElementById("terminal-restart");
  restart.addEventListener("click", () => location.reload());
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
  const query = new URLSearchParams({ service: "pty", rows: term.rows, cols: term.cols });
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
