// Drives execute_code as a task (the MCP Tasks extension, protocol 2026-07-28) with the
// Tasks client library @modelcontextprotocol/ext-tasks on top of the TypeScript SDK v2
// (@modelcontextprotocol/client), and prints one JSON object describing what it saw.
// Usage: node ts_tasks_client.mjs URL [TOKEN]
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
// ext-tasks is ESM only (its exports have no "require" condition, so createRequire cannot load it, as
// ts_sdk_client.mjs loads the SDK); both packages are imported by path from tests/js/node_modules.
const modulePath = (pkg, file) => pathToFileURL(path.join(here, "../../js/node_modules", pkg, file)).href;
const { Client, StreamableHTTPClientTransport } = await import(modulePath("@modelcontextprotocol/client", "dist/index.mjs"));
const { createTaskSessionFromClient, resultFromTaskOutcome } =
  await import(modulePath("@modelcontextprotocol/ext-tasks", "dist/client/index.js"));

const [url, token] = process.argv.slice(2);
const PROTOCOL = "2026-07-28";
const TASKS = "io.modelcontextprotocol/tasks";
const clientInfo = { name: "ts-tasks-test", version: "1.0.0" };
const clientCapabilities = { extensions: { [TASKS]: {} } };
const auth = token ? { Authorization: `Bearer ${token}` } : {};

const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: auth } });
// Pinned to 2026-07-28: the SDK's default negotiation is the 2025 (legacy) handshake,
// where the Tasks extension is not what the package looks for.
const client = new Client(clientInfo, { capabilities: clientCapabilities, versionNegotiation: { mode: { pin: PROTOCOL } } });
await client.connect(transport);

// Every request the package sends itself: what it sent and what came back, for the report.
const wire = [];

/** The host's raw request path: one stateless 2026-07-28 HTTP request per JSON-RPC request. */
let nextId = 1;
async function rawDispatch(request, options = {}) {
  const params = request.params ?? {};
  const name = request.method === "tools/call" ? params.name : params.taskId;
  const body = { ...request, jsonrpc: "2.0", id: request.id ?? `tasks-${nextId++}` };
  const headers = {
    "Content-Type": "application/json",
    Accept: "application/json, text/event-stream",
    "MCP-Protocol-Version": PROTOCOL,
    "Mcp-Method": request.method,
    ...(name === undefined ? {} : { "Mcp-Name": String(name) }),
    ...auth,
    ...(options.context?.headers ?? {}),
  };
  const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body), signal: options.signal });
  const text = await response.text();
  let message;
  if ((response.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    // The answer is the last message carrying this request's id (notifications may come first).
    const messages = text.split(/\r?\n/).filter((l) => l.startsWith("data:") && l.slice(5).trim())
      .map((l) => JSON.parse(l.slice(5)));
    message = messages.filter((m) => m.id === body.id).at(-1) ?? messages.at(-1);
  } else {
    message = text ? JSON.parse(text) : undefined;
  }
  wire.push({ method: request.method, status: response.status, type: response.headers.get("content-type"), sentMeta: Object.keys(params._meta ?? {}), answer: message });
  if (message === undefined) throw new Error(`${request.method}: HTTP ${response.status} with no JSON-RPC answer`);
  if (message.error !== undefined) return { kind: "error", error: message.error };
  return { kind: "result", result: message.result };
}

const session = createTaskSessionFromClient(client, {
  endpointId: `code-execution-mcp ${url}`,
  rawDispatch,
  v2RequestFraming: { protocolVersion: PROTOCOL, clientInfo, clientCapabilities },
});

const report = { era: client.getProtocolEra(), serverCapabilities: client.getServerCapabilities(), capabilities: session.capabilities };
try {
  // 1. A task-backed call, settled.
  const first = await session.callTool("execute_code", { code: "import time\ntime.sleep(1)\nresult = 6 * 7" });
  const events = [];
  const { outcome, lastTask } = await first.settle({
    onEvent: (event) => events.push(event.type === "task" ? `task:${event.task.status}` : `outcome:${event.outcome.status}`),
  });
  const result = resultFromTaskOutcome(outcome);
  report.completed = {
    kind: first.kind,
    taskId: first.handle?.taskId ?? null,
    outcome: outcome.status,
    lastTaskStatus: lastTask?.status ?? null,
    events,
    isError: result.isError ?? null,
    structured: result.structuredContent ?? null,
  };

  // 2. A task that never ends by itself, cancelled through the package.
  const second = await session.callTool("execute_code", {
    code: "import time\nwhile True:\n    open('beat.txt', 'a').write('x')\n    time.sleep(0.05)",
  });
  await new Promise((resolve) => setTimeout(resolve, 1500));
  const before = second.kind === "task" ? (await session.task(second.handle.taskId).snapshot()).status : null;
  await second.cancel();
  const settled = await second.settle();
  // The package ends its local wait on the server's cancel acknowledgement (V2 cancellation is
  // cooperative); the task itself reaches `cancelled` on the server once the execution is stopped.
  let after = null;
  const cancelledAt = Date.now();
  while (second.kind === "task" && Date.now() - cancelledAt < 5000) {
    after = await session.task(second.handle.taskId).snapshot();
    if (["completed", "failed", "cancelled"].includes(after.status)) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  report.cancelled = {
    kind: second.kind,
    taskId: second.handle?.taskId ?? null,
    statusBeforeCancel: before,
    outcome: settled.outcome.status,
    lastTaskStatus: settled.lastTask?.status ?? null,
    serverStatusAfter: after?.status ?? null,
    msToServerStatus: Date.now() - cancelledAt,
  };
} finally {
  await session.close();
  await client.close();
}
report.wire = wire.map(({ method, status, type, sentMeta, answer }) => ({
  method, status, type, sentMeta,
  answer: answer?.error ?? { resultType: answer?.result?.resultType, status: answer?.result?.status },
}));
console.log(JSON.stringify(report));
