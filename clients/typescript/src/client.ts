// createTestamentClient: typed Connect clients for every Testament service (Node).

import { type Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import {
  bearerAuth,
  clientsFor,
  DEFAULT_TIMEOUT_MS,
  withCallDefaults,
  type ServiceName,
  type TestamentClient,
} from "./core.js";

export {
  bearerAuth,
  DEFAULT_TIMEOUT_MS,
  withCallDefaults,
  type ServiceName,
  type TestamentClient,
} from "./core.js";

export interface TestamentClientOptions {
  /**
   * Where the gRPC services listen, e.g. "http://127.0.0.1:50051" (plain-text
   * HTTP/2). Used for every service that has no entry in `endpoints`.
   */
  baseUrl: string;
  /**
   * Per-service addresses, for a stack whose services listen on separate
   * ports (as `testament up` does): e.g. { ingest: "http://127.0.0.1:41233" }.
   * `deployment` defaults to `baseUrl` (every process serves it).
   */
  endpoints?: Partial<Record<ServiceName, string>>;
  /** API key, sent as `authorization: Bearer <key>`. Omit for an open stack. */
  apiKey?: string;
  /**
   * Deadline applied to every call that does not pass its own `timeoutMs`
   * (default 30000). 0 disables the default. A per-call `timeoutMs <= 0`
   * means no deadline for that call.
   */
  timeoutMs?: number;
  /**
   * Use this transport for every service instead of creating gRPC/HTTP2
   * transports (e.g. a browser transport from @connectrpc/connect-web). The
   * bearer header and default deadline are still applied.
   */
  transport?: Transport;
}

/**
 * Creates typed clients for all Testament services.
 *
 * Node: gRPC over plain-text HTTP/2 (@connectrpc/connect-node). Browsers:
 * pass your own `transport`.
 */
export function createTestamentClient(options: TestamentClientOptions): TestamentClient {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isFinite(timeoutMs) || timeoutMs < 0) {
    throw new RangeError(`timeoutMs must be a finite number >= 0, got ${timeoutMs}`);
  }
  const sessions = new Map<string, Http2SessionManager>();
  const transports = new Map<string, Transport>();

  const given = options.transport;
  const shared =
    given === undefined
      ? undefined
      : withCallDefaults(given, {
          timeoutMs,
          ...(options.apiKey !== undefined ? { apiKey: options.apiKey } : {}),
        });

  const transportFor = (service: ServiceName): Transport => {
    if (shared !== undefined) {
      return shared;
    }
    const baseUrl = normalizeBaseUrl(options.endpoints?.[service] ?? options.baseUrl);
    let transport = transports.get(baseUrl);
    if (transport === undefined) {
      const sessionManager = new Http2SessionManager(baseUrl);
      sessions.set(baseUrl, sessionManager);
      transport = createGrpcTransport({
        baseUrl,
        sessionManager,
        interceptors: options.apiKey !== undefined ? [bearerAuth(options.apiKey)] : [],
        ...(timeoutMs > 0 ? { defaultTimeoutMs: timeoutMs } : {}),
      });
      transports.set(baseUrl, transport);
    }
    return transport;
  };

  return clientsFor(transportFor, () => {
    for (const session of sessions.values()) {
      session.abort();
    }
    sessions.clear();
    transports.clear();
  });
}

function normalizeBaseUrl(url: string): string {
  // Accept "127.0.0.1:50051" as printed by `testament up`.
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(url) ? url : `http://${url}`;
  return withScheme.replace(/\/+$/, "");
}
