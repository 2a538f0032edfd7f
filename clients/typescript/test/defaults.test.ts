// Unit tests (no stack): call defaults and error decoding over an in-memory transport.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { create } from "@bufbuild/protobuf";
import { createRouterTransport } from "@connectrpc/connect";

import {
  Code,
  ConnectError,
  ErrorInfoSchema,
  RetryInfoSchema,
  TestamentError,
  createTestamentClient,
  deploymentv1,
  toTestamentError,
} from "../src/index.js";

/** A DeploymentService whose checkHealth echoes the auth header and deadline it saw. */
const transport = createRouterTransport(({ service }) => {
  service(deploymentv1.DeploymentService, {
    checkHealth(_req, ctx) {
      return { status: `${ctx.requestHeader.get("authorization") ?? "-"}|${ctx.timeoutMs() === undefined ? "none" : "deadline"}` };
    },
    getDeployment() {
      throw new ConnectError("credential may not perform this operation", Code.ResourceExhausted, undefined, [
        {
          desc: ErrorInfoSchema,
          value: {
            reason: "RATE_LIMITED",
            domain: "testament",
            metadata: { http_status: "429", detail: JSON.stringify({ code: "rate_limited" }) },
          },
        },
        { desc: RetryInfoSchema, value: { retryDelay: create(DurationSchema, { seconds: 2n, nanos: 500_000_000 }) } },
      ]);
    },
  });
});

describe("call defaults", () => {
  test("a given transport gets the bearer header and the default deadline", async () => {
    const c = createTestamentClient({ baseUrl: "http://unused", apiKey: "k1", transport });
    assert.equal((await c.deployment.checkHealth({})).status, "Bearer k1|deadline");
  });

  test("a caller's own authorization header and timeoutMs <= 0 win", async () => {
    const c = createTestamentClient({ baseUrl: "http://unused", apiKey: "k1", transport });
    const r = await c.deployment.checkHealth({}, { headers: { authorization: "Bearer mine" }, timeoutMs: 0 });
    assert.equal(r.status, "Bearer mine|none");
  });

  test("no key, timeoutMs 0: nothing added", async () => {
    const c = createTestamentClient({ baseUrl: "http://unused", timeoutMs: 0, transport });
    assert.equal((await c.deployment.checkHealth({})).status, "-|none");
  });

  test("a negative timeoutMs is refused", () => {
    assert.throws(() => createTestamentClient({ baseUrl: "http://127.0.0.1:1", timeoutMs: -1 }), RangeError);
  });
});

describe("toTestamentError", () => {
  test("decodes ErrorInfo and RetryInfo", async () => {
    const c = createTestamentClient({ baseUrl: "http://unused", transport });
    const err = await c.deployment.getDeployment({}).then(
      () => assert.fail("expected an error"),
      (e: unknown) => toTestamentError(e),
    );
    assert.ok(err instanceof TestamentError);
    assert.equal(err.code, Code.ResourceExhausted);
    assert.equal(err.reason, "RATE_LIMITED");
    assert.equal(err.domain, "testament");
    assert.equal(err.httpStatus, 429);
    assert.deepEqual(err.detail, { code: "rate_limited" });
    assert.equal(err.retryAfterMs, 2500);
    assert.equal(err.message, "credential may not perform this operation");
  });

  test("any other error becomes a TestamentError without details", () => {
    const err = toTestamentError(new Error("boom"));
    assert.equal(err.code, Code.Unknown);
    assert.equal(err.reason, "");
    assert.equal(err.httpStatus, undefined);
    assert.equal(err.detail, undefined);
  });
});
