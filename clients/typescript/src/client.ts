// createTestamentClient: typed Connect clients for every Testament service.

import type { DescMessage, DescMethodStreaming, DescMethodUnary, MessageInitShape } from "@bufbuild/protobuf";
import {
  createClient,
  type Client,
  type ContextValues,
  type Interceptor,
  type StreamResponse,
  type Transport,
  type UnaryResponse,
} from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import { DeploymentService } from "./gen/testament/common/v1/deployment_pb.js";
import { GraphService } from "./gen/testament/graph/v1/graph_pb.js";
import { IngestService } from "./gen/testament/ingest/v1/ingest_pb.js";
import { PipelineService } from "./gen/testament/pipeline/v1/pipeline_pb.js";
import { QuerySpaceService } from "./gen/testament/queryspace/v1/queryspace_pb.js";
import { RetrievalService } from "./gen/testament/retrieval/v1/retrieval_pb.js";

/** What `new Headers()` accepts (HeadersInit without depending on the DOM lib). */
type HeadersInit = ConstructorParameters<typeof Headers>[0];

/** The services a TestamentClient talks to (keys of the client object). */
export type ServiceName = "deployment" | "ingest" | "pipeline" | "retrieval" | "graph" | "queryspace";

/** Default deadline of every call, in milliseconds. */
export const DEFAULT_TIMEOUT_MS = 30_000;

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

/** Typed clients, one per service. */
export interface TestamentClient {
  deployment: Client<typeof DeploymentService>;
  ingest: Client<typeof IngestService>;
  pipeline: Client<typeof PipelineService>;
  retrieval: Client<typeof RetrievalService>;
  graph: Client<typeof GraphService>;
  queryspace: Client<typeof QuerySpaceService>;
  /** Closes the HTTP/2 connections this client opened (none when `transport` was given). */
  close(): void;
}

/** An interceptor that sends `authorization: Bearer <apiKey>` (unless the call set one). */
export function bearerAuth(apiKey: string): Interceptor {
  return (next) => async (req) => {
    if (!req.header.has("authorization")) {
      req.header.set("authorization", `Bearer ${apiKey}`);
    }
    return await next(req);
  };
}

/**
 * Wraps any transport so every call gets a default deadline and the bearer
 * header. Use it for transports you build yourself.
 */
export function withCallDefaults(
  transport: Transport,
  defaults: { timeoutMs?: number; apiKey?: string },
): Transport {
  const timeout = (t: number | undefined): number | undefined =>
    t === undefined && defaults.timeoutMs !== undefined && defaults.timeoutMs > 0 ? defaults.timeoutMs : t;
  const headers = (h: HeadersInit | undefined): HeadersInit | undefined => {
    if (defaults.apiKey === undefined) {
      return h;
    }
    const merged = new Headers(h);
    if (!merged.has("authorization")) {
      merged.set("authorization", `Bearer ${defaults.apiKey}`);
    }
    return merged;
  };
  return {
    unary<I extends DescMessage, O extends DescMessage>(
      method: DescMethodUnary<I, O>,
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: HeadersInit | undefined,
      input: MessageInitShape<I>,
      contextValues?: ContextValues,
    ): Promise<UnaryResponse<I, O>> {
      return transport.unary(method, signal, timeout(timeoutMs), headers(header), input, contextValues);
    },
    stream<I extends DescMessage, O extends DescMessage>(
      method: DescMethodStreaming<I, O>,
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: HeadersInit | undefined,
      input: AsyncIterable<MessageInitShape<I>>,
      contextValues?: ContextValues,
    ): Promise<StreamResponse<I, O>> {
      return transport.stream(method, signal, timeout(timeoutMs), headers(header), input, contextValues);
    },
  };
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

  return {
    deployment: createClient(DeploymentService, transportFor("deployment")),
    ingest: createClient(IngestService, transportFor("ingest")),
    pipeline: createClient(PipelineService, transportFor("pipeline")),
    retrieval: createClient(RetrievalService, transportFor("retrieval")),
    graph: createClient(GraphService, transportFor("graph")),
    queryspace: createClient(QuerySpaceService, transportFor("queryspace")),
    close(): void {
      for (const session of sessions.values()) {
        session.abort();
      }
      sessions.clear();
      transports.clear();
    },
  };
}

function normalizeBaseUrl(url: string): string {
  // Accept "127.0.0.1:50051" as printed by `testament up`.
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(url) ? url : `http://${url}`;
  return withScheme.replace(/\/+$/, "");
}
