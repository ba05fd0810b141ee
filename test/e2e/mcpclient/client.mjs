// An MCP client nobody in toolgate wrote: the official TypeScript SDK. The e2e
// suite runs it against a task's endpoint and reads what it prints, one JSON
// object per line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = new URL(process.env.MCP_URL);
const token = process.env.MCP_TOKEN;
const calls = JSON.parse(process.env.MCP_CALLS || "[]");
const print = (o) => process.stdout.write(JSON.stringify(o) + "\n");

const transport = new StreamableHTTPClientTransport(url, {
  requestInit: token ? { headers: { Authorization: `Bearer ${token}` } } : {},
});
const client = new Client({ name: "e2e-typescript-client", version: "1.0.0" });
try {
  await client.connect(transport);
} catch (err) {
  print({ connectError: String(err && err.message ? err.message : err) });
  process.exit(0);
}
const { tools } = await client.listTools();
print({ tools: tools.map((t) => t.name) });
for (const call of calls) {
  const progress = [];
  const result = await client.callTool(
    { name: call.name, arguments: call.arguments },
    undefined,
    { onprogress: (p) => progress.push(p.message), resetTimeoutOnProgress: true, timeout: 120000 },
  );
  print({ call: call.name, isError: !!result.isError, text: result.content.map((c) => c.text).join(""), structured: result.structuredContent, progress });
}
await client.close();
