// Drives the server with the TypeScript SDK (@modelcontextprotocol/sdk 1.x)
// and prints one JSON object describing what it saw.
// Usage: node ts_sdk_client.mjs stdio BIN DATA_DIR | node ts_sdk_client.mjs http URL [TOKEN]
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../js/package.json"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const [mode, target, extra] = process.argv.slice(2);
let transport;
if (mode === "stdio") {
  transport = new StdioClientTransport({ command: target, args: ["--data-dir", extra, "--log-level", "warn", "serve"] });
} else {
  const headers = extra ? { Authorization: `Bearer ${extra}` } : {};
  transport = new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers } });
}
const client = new Client({ name: "ts-sdk-test", version: "1.0.0" });
await client.connect(transport);
const tools = await client.listTools();
const written = await client.callTool({ name: "write_workspace_file", arguments: { filename: "ts/hello.txt", content: "from ts" } });
const read = await client.callTool({ name: "read_workspace_file", arguments: { filename: "ts/hello.txt" } });
const bad = await client.callTool({ name: "read_workspace_file", arguments: { filename: "/etc/passwd" } });
// A picture and a table in one answer, without packages: SVG drawn by the host.
const chartCode = `show(b'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><rect width="20" height="20" fill="red"/></svg>')
result = [{'n': 1, 's': 'a'}, {'n': 2, 's': 'b'}]`;
const chart = await client.callTool({ name: "execute_code", arguments: { code: chartCode } });
const image = chart.content.find((b) => b.type === "image");
console.log(JSON.stringify({
  chart: {
    types: chart.content.map((b) => b.type),
    text: chart.content[0].text,
    image: image?.data ?? null,
    mime: image?.mimeType ?? null,
    structured: chart.structuredContent,
  },
  protocolVersion: transport.protocolVersion ?? null,
  server: client.getServerVersion(),
  tools: tools.tools.map((t) => t.name),
  written: written.structuredContent,
  read: read.structuredContent,
  bad: { isError: bad.isError, structured: bad.structuredContent },
}));
await client.close();
