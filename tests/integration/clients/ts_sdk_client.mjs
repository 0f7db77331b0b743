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
console.log(JSON.stringify({
  protocolVersion: transport.protocolVersion ?? null,
  server: client.getServerVersion(),
  tools: tools.tools.map((t) => t.name),
  written: written.structuredContent,
  read: read.structuredContent,
  bad: { isError: bad.isError, structured: bad.structuredContent },
}));
await client.close();
