// Testament in a browser: every service through the gateway's HTTP address, over the
// Connect protocol (JSON or binary, unary and server streaming). Nothing here needs
// Node; import it from "testament-sdk/web" (or this file) in a bundler.
//
//   const memory = createWebClient({ baseUrl: "https://memory.example.com", apiKey });
//   const found = await memory.retrieval.resolve({ name: "Ravi" });
//
// The gateway must allow the page's origin (TESTAMENT_CORS_ORIGINS). Uploads (a client
// stream) need HTTP/2 streaming requests, which browsers do not offer: use POST /ingest.

import { createConnectTransport } from "@connectrpc/connect-web";

import { clientsFor, DEFAULT_TIMEOUT_MS, withCallDefaults, type TestamentClient } from "./core.js";

export interface WebClientOptions {
  /** The gateway's HTTP address, e.g. "http://127.0.0.1:8000". */
  baseUrl: string;
  /** API key, sent as `authorization: Bearer <key>`. */
  apiKey?: string;
  /** Default deadline of every call in ms (default 30000; 0 = none). */
  timeoutMs?: number;
  /** Binary protobuf instead of JSON on the wire. */
  useBinaryFormat?: boolean;
}

export function createWebClient(options: WebClientOptions): TestamentClient {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const transport = withCallDefaults(
    createConnectTransport({ baseUrl: options.baseUrl.replace(/\/+$/, ""), useBinaryFormat: options.useBinaryFormat ?? false }),
    { timeoutMs, ...(options.apiKey !== undefined ? { apiKey: options.apiKey } : {}) },
  );
  return clientsFor(() => transport, () => undefined);
}

export { toTestamentError, TestamentError } from "./errors.js";
