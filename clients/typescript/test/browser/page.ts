// Runs inside headless Chromium: the web SDK against the gateway named in ?gateway=,
// results sent back to the page's own server for the test to read.

import { createWebClient, toTestamentError } from "../../src/web.js";

declare const location: { search: string };
declare function fetch(url: string, init: { method: string; body: string }): Promise<unknown>;

async function run(): Promise<Record<string, unknown>> {
  const gateway = new URLSearchParams(location.search).get("gateway") ?? "";
  const json = createWebClient({ baseUrl: gateway, timeoutMs: 15_000 });
  const binary = createWebClient({ baseUrl: gateway, timeoutMs: 15_000, useBinaryFormat: true });
  const out: Record<string, unknown> = {};
  out["operations"] = (await json.retrieval.listOperations({})).operations.length;
  out["health"] = (await binary.deployment.checkHealth({})).status;
  const docs = await json.ingest.listDocuments({ limit: 5 });
  out["documents"] = docs.documents.length;
  const versionId = docs.documents[0]?.latest?.versionId ?? "";
  const stream = json.ingest.watchReadiness({
    versionIds: [versionId],
    require: { pipeline: true, p1: false, liveGraph: false, p3: false },
  });
  for await (const message of stream) {
    out["streamed"] = message.report?.versions[0]?.versionId === versionId;
    break;
  }
  try {
    await json.retrieval.hydrateRelation({ relationId: "not-a-uuid" });
    out["error"] = "none";
  } catch (err) {
    const e = toTestamentError(err);
    out["error"] = { code: e.code, domain: e.domain };
  }
  return out;
}

function write(value: unknown): void {
  void fetch("/result", { method: "POST", body: JSON.stringify(value) });
}

run().then(write, (err: unknown) => write({ failure: String(err) }));
