// The console calls the gateway's Connect JSON API with fetch; the CSP
// forbids inline scripts, so the code lives here.
document.getElementById("login").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const status = document.getElementById("status");
  const res = await fetch("/portcullis.v1.SandboxService/ListSandboxes", {
    method: "POST",
    headers: { "Content-Type": "application/json", "Authorization": "Bearer " + document.getElementById("token").value },
    body: "{}",
  });
  const body = await res.json();
  if (!res.ok) { status.textContent = body.message || res.statusText; return; }
  const tbody = document.querySelector("#sandboxes tbody");
  tbody.replaceChildren();
  for (const sb of body.sandboxes || []) {
    const tr = document.createElement("tr");
    for (const v of [sb.name, sb.currentVersion || "0", (sb.currentHash || "").slice(0, 12)]) {
      const td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
    }
    tbody.appendChild(tr);
  }
  document.getElementById("sandboxes").hidden = false;
  status.textContent = (body.sandboxes || []).length + " sandbox(es)";
});
