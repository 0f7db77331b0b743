// Progress and cancellation with the TypeScript SDK (@modelcontextprotocol/sdk 1.x) over stdio; prints
// one JSON object: the progress notifications seen during an execution, and how a cancelled
// `while True` execution and the execution after it went.
// Usage: node ts_progress_client.mjs BIN DATA_DIR
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../js/package.json"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");

const [bin, dataDir] = process.argv.slice(2);
const transport = new StdioClientTransport({ command: bin, args: ["--data-dir", dataDir, "--log-level", "warn", "serve"] });
const client = new Client({ name: "ts-progress-test", version: "1.0.0" });
await client.connect(transport);

const progress = [];
const code = "import time\nfor i in range(1, 6):\n    time.sleep(0.15)\n    report_progress(i, 5, f'step {i}')\nresult = 'done'";
const done = await client.callTool({ name: "execute_code", arguments: { code } }, undefined, {
  onprogress: (p) => progress.push(p),
});

// The cancelled code appends to a heartbeat file: once it is killed the file stops growing.
const beat = path.join(dataDir, "workspace", "beat.txt");
const size = () => (fs.existsSync(beat) ? fs.statSync(beat).size : 0);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const heartbeat = "import time\nwhile True:\n    with open('beat.txt', 'a') as f:\n        f.write('x')\n    time.sleep(0.05)";
const abort = new AbortController();
const started = Date.now();
const spinning = client
  .callTool({ name: "execute_code", arguments: { code: heartbeat } }, undefined, { signal: abort.signal, timeout: 60000 })
  .then(() => "finished", (e) => `rejected: ${e.message}`);
setTimeout(() => abort.abort("the test cancels it"), 1500);
const cancelled = await spinning;
const beforeCancel = size();
await sleep(1000);
const settled = size();
await sleep(500);
const stillGrowing = size() !== settled;
const next = await client.callTool({ name: "execute_code", arguments: { code: "result = 6 * 7" } });
console.log(JSON.stringify({
  progress,
  result: done.structuredContent?.result ?? null,
  cancelled,
  cancelledAfterMs: Date.now() - started,
  beatsBeforeCancel: beforeCancel,
  stillGrowing,
  next: next.structuredContent?.result ?? null,
}));
await client.close();
