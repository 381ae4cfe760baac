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
  const encoder = new TextEncoder();
  const follow = document.getElementById("terminal-follow");
  let socket = null;
  let agent = box.dataset.agent;
  let opened = false;  // whether the current socket ever opened (one that never did: the agent refused it)
  const send = (data) => { if (socket && socket.readyState === WebSocket.OPEN) socket.send(data); };

  const connect = () => {
    const query = new URLSearchParams({ service: "pty", rows: term.rows, cols: term.cols, reconnect: session });
    socket = new WebSocket(`${scheme}//${location.host}${box.dataset.socket}?${query}`);
    socket.binaryType = "arraybuffer";
    opened = false;
    socket.onopen = () => {
      opened = true;
      follow.hidden = restart.hidden = true;
      show("connected", "badge-ok");
      term.focus();
    };
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
      if (state.textContent === "exited") return;  // the shell ended: nothing to follow
      show(reason, "badge-err");
      if (event.code >= 4000 && event.reason) term.write(`\r\n${event.reason}\r\n`);
      watch(opened);
    };
  };

  // After the socket closes, the workspace may have been rebuilt (an update or restart gives it a new agent):
  // ask which agent serves it now, and reconnect when that one is connected. The old agent's session went with
  // it, so a new agent gets a new session (and the page's address names the new agent's terminal). What cannot
  // be followed here is said, with the new terminal's link.
  let watching = false;
  const watch = (wasOpen) => {
    if (watching) return;
    watching = true;
    let delay = 1000;
    let retry = wasOpen;
    const check = async () => {
      let found = null;
      try {
        const reply = await fetch(box.dataset.current, { headers: { Accept: "application/json" }, cache: "no-store" });
        if (!reply.ok) {
          show(reply.status === 404 ? "the workspace is gone" : "cannot follow the workspace", "badge-err");
          watching = false;
          return;
        }
        found = (await reply.json()).agent;
      } catch (error) {
        found = undefined;  // the server is away for now (restarting): ask again
      }
      if (found && found.id !== agent) {
        follow.href = found.terminal_url;
        follow.hidden = false;
        if (found.status === "connected") {
          show("reconnecting to the new agent…", "badge-info");
          agent = found.id;
          box.dataset.socket = found.socket_path;
          box.dataset.current = box.dataset.current.replace(/\/agents\/[^/]+\//, `/agents/${found.id}/`);
          session = uuid4();
          const next = new URL(found.terminal_url, location.href);
          next.search = address.search;
          next.searchParams.set("session", session);
          history.replaceState(null, "", next);
          address.pathname = next.pathname;
          address.search = next.search;
          term.write("\r\n[the workspace was rebuilt: reconnecting to its new agent]\r\n");
          watching = false;
          connect();
          return;
        }
        show("waiting for the new agent to connect…", "badge-info");
      } else if (found && found.status === "connected" && retry) {
        // The same agent, connected (its connection dropped and came back, or a stop has not replaced it yet):
        // try its session once; if that is refused, this watch goes on for a new agent.
        show("reconnecting…", "badge-info");
        watching = false;
        connect();
        return;
      } else if (found && found.status !== "connected") {
        retry = true;  // the same agent, not connected now: worth a try once it is again
      } else if (found === null) {
        show("the workspace has no agent now (stopped or building)", "badge-err");
      }
      delay = Math.min(delay * 1.5, 5000);
      setTimeout(check, delay);
    };
    setTimeout(check, 300);
  };
  connect();

  term.onData((data) => send(encoder.encode(data)));
  term.onBinary((data) => send(Uint8Array.from(data, (c) => c.charCodeAt(0))));
  term.onResize(({ rows, cols }) => send(JSON.stringify({ type: "resize", rows: rows, cols: cols })));
  window.addEventListener("resize", () => fit.fit());
})();
