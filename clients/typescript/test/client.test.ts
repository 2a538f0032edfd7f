// End-to-end tests of the SDK against a real stack started with `testament up`.

import assert from "node:assert/strict";
import { createHash, randomUUID } from "node:crypto";
import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, describe, test } from "node:test";

import { createConnectTransport } from "@connectrpc/connect-node";

import {
  Code,
  ConnectError,
  TestamentError,
  createTestamentClient,
  toTestamentError,
  uploadDocument,
  watchReadiness,
  type ServiceName,
  type TestamentClient,
} from "../src/index.js";
import { REPO, startStack, type Stack } from "./stack.js";

const SERVICES = ["ingest", "pipeline", "retrieval", "graph", "queryspace"] as const;

let stack: Stack;
const clients: TestamentClient[] = [];

function client(service: ServiceName | "all"): TestamentClient {
  const endpoint = (name: string): string => {
    const address = stack.addresses[name];
    assert.ok(address, `no address for ${name} in the startup line`);
    return `http://${address}`;
  };
  const c =
    service === "all"
      ? createTestamentClient({
          baseUrl: endpoint("ingest"),
          endpoints: Object.fromEntries(SERVICES.map((s) => [s, endpoint(s)])),
          timeoutMs: 10_000,
        })
      : createTestamentClient({ baseUrl: endpoint(service === "deployment" ? "ingest" : service), timeoutMs: 10_000 });
  clients.push(c);
  return c;
}

before(async () => {
  stack = await startStack();
});

after(async () => {
  for (const c of clients) {
    c.close();
  }
  await stack.stop();
});

describe("testament stack", () => {
  test("startup line names every service", () => {
    for (const name of [...SERVICES, "gateway"]) {
      assert.match(stack.addresses[name] ?? "", /^127\.0\.0\.1:\d+$/, name);
    }
  });

  test("deployment.getDeployment on the ingest port: empty build info", async () => {
    const response = await client("deployment").deployment.getDeployment({});
    assert.equal(response.buildRevision, "");
    assert.equal(response.modelBindings["p1_embedding"], "all-MiniLM-L6-v2-int8"); // the default embedder (int8 MiniLM)
    assert.equal(response.tools["facts_context"], 3);
    assert.equal(response.tools["query_sql"], 1); // the SQL face is served
  });

  test("deployment.checkHealth answers ok on every service port", async () => {
    for (const name of SERVICES) {
      const response = await client(name).deployment.checkHealth({});
      assert.equal(response.status, "ok", name);
    }
  });

  test("one client with per-service endpoints reaches every service", async () => {
    const c = client("all");
    assert.deepEqual((await c.pipeline.listDeadLetters({})).deadLetters, []);
    assert.deepEqual((await c.ingest.listDocuments({})).documents.length >= 0, true);
    assert.equal((await c.retrieval.listOperations({})).operations.length, 4);
    assert.equal((await c.queryspace.describeQuerySpace({})).schema, "memory_v1");
  });

  test("a refused RPC carries its code, reason and HTTP status; a refused statement is a result", async () => {
    const qs = client("queryspace").queryspace;
    await assert.rejects(qs.describeSavedQuery({ namespace: "examples", name: "no_such_query" }), (err: unknown) => {
      assert.ok(err instanceof ConnectError);
      assert.equal(err.code, Code.NotFound);
      const e = toTestamentError(err);
      assert.ok(e instanceof TestamentError);
      assert.equal(e.code, Code.NotFound);
      assert.equal(e.reason, "SAVED_QUERY_NOT_FOUND");
      assert.equal(e.domain, "testament");
      assert.equal(e.httpStatus, 404);
      assert.equal(toTestamentError(e), e);
      return true;
    });
    const refused = await qs.runSql({ sql: "SELECT * FROM pg_class" });
    assert.equal(refused.result?.contract, "QueryResult/v1");
    assert.equal(refused.result?.errorCode, 4); // QUERY_ERROR_CODE_RELATION_NOT_ALLOWED
    const ran = await qs.runSql({ sql: "SELECT 1 AS one" });
    assert.equal(ran.result?.columns[0]?.name, "one");
  });

  test("the gateway's HTTP face answers /healthz", async () => {
    const response = await fetch(`${stack.gatewayUrl}/healthz`);
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), { status: "ok" });
  });

  test("uploadDocument streams bytes and the same bytes again are not a new version", async () => {
    const text = `hello from typescript ${randomUUID()}\n`;
    async function* chunks(): AsyncGenerator<Uint8Array> {
      const bytes = new TextEncoder().encode(text);
      yield bytes.slice(0, 7);
      yield bytes.slice(7);
    }
    const first = await uploadDocument(client("ingest").ingest, { filename: "hello.md", mime: "text/markdown" }, chunks());
    assert.equal(first.created, true);
    assert.equal(first.title, "hello");
    assert.equal(first.contentHash, createHash("sha256").update(text).digest("hex"));
    const again = await uploadDocument(client("ingest").ingest, { filename: "hello.md", mime: "text/markdown" }, chunks());
    assert.equal(again.created, false);
    assert.equal(again.versionId, first.versionId);
  });

  test("uploadDocument refusals arrive as TestamentError with the HTTP status", async () => {
    async function* chunks(): AsyncGenerator<Uint8Array> {
      yield new TextEncoder().encode("x");
    }
    await assert.rejects(
      uploadDocument(client("ingest").ingest, { filename: "a.md", mime: "text/markdown", sourceRef: "lonely" }, chunks()),
      (err: unknown) => {
        assert.ok(err instanceof TestamentError);
        assert.equal(err.code, Code.InvalidArgument);
        assert.equal(err.httpStatus, 422);
        assert.equal(err.detail, "source_kind and source_ref must be supplied together");
        return true;
      },
    );
  });

  test("watchReadiness pushes the first report of a version", async () => {
    async function* chunks(): AsyncGenerator<Uint8Array> {
      yield new TextEncoder().encode(`watched ${randomUUID()}`);
    }
    const version = await uploadDocument(client("ingest").ingest, { filename: "w.md", mime: "text/markdown" }, chunks());
    const request = {
      versionIds: [version.versionId],
      require: { pipeline: true, p1: false, liveGraph: false, p3: false },
    };
    for await (const message of watchReadiness(client("ingest"), request)) {
      const report = message.report;
      assert.ok(report);
      assert.equal(report.ready, false);
      assert.equal(report.versions[0]?.stages[0]?.stage, "convert");
      break; // the pipeline is not running in this stack: one report is enough
    }
  });

  test("the gateway's gRPC address alone reaches every service (the front door)", async () => {
    const c = createTestamentClient({ baseUrl: `http://${stack.addresses["gateway"]}`, timeoutMs: 10_000 });
    clients.push(c);
    assert.equal((await c.retrieval.listOperations({})).operations.length, 4);
    assert.deepEqual((await c.pipeline.listDeadLetters({})).deadLetters, []);
    assert.equal((await c.deployment.checkHealth({})).status, "ok");
    async function* chunks(): AsyncGenerator<Uint8Array> {
      yield new TextEncoder().encode(`through the front door ${randomUUID()}\n`);
    }
    const version = await uploadDocument(c, { filename: "door.md", mime: "text/markdown" }, chunks());
    assert.equal(version.created, true);
    assert.equal((await c.queryspace.describeQuerySpace({})).schema, "memory_v1");
    const entity = "00000000-0000-4000-8000-000000000000";
    const around = await c.graph.neighborhood({ entityId: entity, hops: 1 });
    assert.ok(around.envelope); // an unknown entity is a typed negative, reached through the one address
    const request = { versionIds: [version.versionId], require: { pipeline: true, p1: false, liveGraph: false, p3: false } };
    for await (const message of watchReadiness(c, request)) {
      assert.equal(message.report?.versions[0]?.versionId, version.versionId);
      break;
    }
  });

  test("the Connect protocol over HTTP/1.1 at the gateway's HTTP address: unary and server streaming", async () => {
    const transport = createConnectTransport({ baseUrl: stack.gatewayUrl, httpVersion: "1.1" });
    const c = createTestamentClient({ baseUrl: stack.gatewayUrl, transport, timeoutMs: 10_000 });
    clients.push(c);
    assert.equal((await c.retrieval.listOperations({})).operations.length, 4);
    const listed = await c.ingest.listDocuments({ limit: 5 });
    assert.ok(listed.documents.length >= 1);
    const versionId = listed.documents[0]?.latest?.versionId ?? "";
    const request = { versionIds: [versionId], require: { pipeline: true, p1: false, liveGraph: false, p3: false } };
    let reports = 0;
    for await (const message of watchReadiness(c, request)) {
      assert.equal(message.report?.versions[0]?.versionId, versionId);
      reports += 1;
      break;
    }
    assert.equal(reports, 1);
    await assert.rejects(c.retrieval.hydrateRelation({ relationId: "not-a-uuid" }), (err: unknown) => {
      const e = toTestamentError(err);
      assert.equal(e.code, Code.InvalidArgument);
      assert.equal(e.domain, "testament");
      return true;
    });
  });

  test("the README's Node example runs as written (pointed at this stack)", async () => {
    const readme = await readFile(join(REPO, "clients/typescript/README.md"), "utf8");
    const example = /```ts node\n([\s\S]*?)```/.exec(readme)?.[1];
    assert.ok(example, "the README has no ```ts node block");
    const file = join(REPO, `.readme-example-${randomUUID()}.ts`);
    await writeFile(file, example.replace("http://127.0.0.1:8001", `http://${stack.addresses["gateway"]}`));
    const logged: unknown[] = [];
    const log = console.log;
    console.log = (...items: unknown[]) => void logged.push(...items);
    try {
      await import(pathToFileURL(file).href);
    } finally {
      console.log = log;
      await rm(file, { force: true });
    }
    assert.deepEqual(logged, [3]);
  });
});
